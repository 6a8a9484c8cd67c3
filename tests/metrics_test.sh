#!/usr/bin/env bash
# Metrics a fleet can scrape: `attach --listen` serves /metrics, scraped
# here with curl after a known workload, its counters equal to `stats
# --json`'s; other paths and methods are answered 404 and 405; a client
# that sends nothing holds the endpoint no longer than 5 s; the address
# survives a restart; an address other hosts reach is refused without
# --insecure, nothing changed; docs/usage.md lists every metric name.
# And the history a minute a row (a second here): its minutes add up to
# the counters, as a table, JSON and a PNG; a stats --reset changes
# neither the history nor /metrics's counters.
# Usage: metrics_test.sh PATH/TO/cachectl PATH/TO/docs/usage.md
set -u
C=$1 DOC=$2
for tool in curl qemu-io; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed (run scripts/setup.sh)"; exit 1; }
done
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state CACHECTL_HISTORY_SECONDS=1
idle_pid=
cleanup() {
  [ -n "$idle_pid" ] && kill "$idle_pid" 2>/dev/null
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
source "$(dirname "$0")/support/cli_lib.sh"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port/metrics
truncate -s 64M "$W/origin.img"
truncate -s 32M "$W/ssd.img"

echo "== bad input: nothing changes"
expect 2 "is reached from other hosts, and /metrics has no authentication" -- \
  attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --frontend socket --listen "0.0.0.0:$port"
expect 2 "--listen" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --frontend socket --listen nowhere
[ -z "$(ls "$W/state" 2>/dev/null)" ] || fail "a refused attach left state"

echo "== a known workload, scraped"
expect 0 "" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --mode writeback --frontend socket \
  --listen "127.0.0.1:$port"
expect 0 "" -- set vol --seq-cutoff 0
io vol -c 'write -P 0x5a 0 1M' -c 'read -P 0x5a 0 1M' -c 'read 8M 64k'
curl -sf "$url" >"$W/metrics" || fail "curl $url"
"$C" stats vol --json >"$W/json"
# Runs a python snippet in the background that writes $W/ready once it holds
# its socket; waits for that (a loaded machine may take a while to start it).
hold() {
  rm -f "$W/ready"
  python3 -c "$1
open('$W/ready', 'w').close(); time.sleep(60)" &
  idle_pid=$!
  for _ in $(seq 200); do [ -e "$W/ready" ] && return; sleep 0.05; done
  fail "the socket holder did not start"
}
value() { grep -F "$1{cache=\"vol\",mode=\"writeback\"${2:-}} " "$W/metrics" | awk "{print \$2}"; }
field() { grep -o "\"$1\": [0-9.]*" "$W/json" | awk '{print $2}'; }
[ "$(value cachectl_up)" = 1 ] || fail "cachectl_up: $(cat "$W/metrics" | head -5)"
for pair in cachectl_read_requests_total:read_requests cachectl_write_requests_total:write_requests \
            cachectl_written_bytes_total:write_bytes cachectl_dirty_lines:dirty_lines; do
  metric=${pair%%:*} f=${pair#*:}
  [ -n "$(value "$metric")" ] && [ "$(value "$metric")" = "$(field "$f")" ] ||
    fail "$metric is '$(value "$metric")', stats says $f = $(field "$f")"
done
[ "$(value cachectl_read_requests_total)" = 2 ] || fail "two reads were sent: $(value cachectl_read_requests_total)"
[ "$(value cachectl_blocks_total ',result="read_hit"')" = "$(field read_hits)" ] || fail "read_hit blocks"
grep -q '^# TYPE cachectl_blocks_total counter$' "$W/metrics" || fail "no TYPE line for cachectl_blocks_total"
curl -s -D "$W/headers" -o /dev/null "$url"
grep -qi '^Content-Type: text/plain; version=0.0.4' "$W/headers" || fail "content type: $(cat "$W/headers")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/")" = 404 ] || fail "/ is not 404"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url")" = 405 ] || fail "POST is not 405"
"$C" stats vol --prometheus >"$W/prom" || fail "stats --prometheus"
diff <(grep '^# TYPE' "$W/prom") <(grep '^# TYPE' "$W/metrics") >/dev/null || fail "stats --prometheus and /metrics differ in families"

echo "== the history: its minutes add up to the counters"
sum() { grep -o "\"$1\": [0-9]*" "$W/history" | awk '{s += $2} END {print s + 0}'; }
# Until the sampler has taken a minute past the workload (a second here; a
# loaded machine may run it late), at most 20 s.
settle_history() {  # settle_history EXPECTED_READ_HITS
  for _ in $(seq 40); do
    "$C" stats vol --history --json >"$W/history" || fail "stats --history --json"
    [ "$(sum read_hits)" = "$1" ] && return
    sleep 0.5
  done
}
"$C" stats vol --json >"$W/json"
settle_history "$(field read_hits)"
[ "$(sum read_hits)" = "$(field read_hits)" ] || fail "history read hits $(sum read_hits), stats $(field read_hits)"
[ "$(sum write_misses)" = "$(field write_misses)" ] || fail "history write misses $(sum write_misses)"
grep -q '"dirty_bytes": 1048576' "$W/history" || fail "no minute ends with 1 MiB dirty: $(cat "$W/history")"
expect 0 "" -- stats vol --history
grep -q '^MINUTE  *READS  *READ HIT' "$W/out" || fail "history table: $(cat "$W/out")"
expect 0 "" -- stats vol --history --plot "$W/history.png"
[ "$(head -c 4 "$W/history.png" | tail -c 3)" = PNG ] || fail "--plot wrote no PNG"
# A stats --reset zeroes what stats shows, not the history nor /metrics's counters.
hits_before=$(field read_hits) requests_before=$(value cachectl_read_requests_total)
"$C" stats vol --reset >/dev/null || fail "stats --reset"
io vol -c 'read -P 0x5a 0 1M'
"$C" stats vol --json >"$W/json"
settle_history $((hits_before + $(field read_hits)))
[ "$(sum read_hits)" = $((hits_before + $(field read_hits))) ] ||
  fail "history read hits $(sum read_hits) after a reset; $hits_before before it, $(field read_hits) since"
curl -sf "$url" >"$W/metrics"
[ "$(value cachectl_read_requests_total)" = $((requests_before + 1)) ] ||
  fail "/metrics read requests went from $requests_before to $(value cachectl_read_requests_total) over a reset"
expect 2 "goes with --history" -- stats vol --plot "$W/x.png"
expect 2 "goes with --json and --plot only" -- stats vol --history --csv

echo "== a client that sends nothing is let go"
hold "
import socket, time
s = socket.create_connection(('127.0.0.1', $port))"
start=$(date +%s)
curl -sf --max-time 20 "$url" >/dev/null || fail "a scrape behind an idle client failed"
[ $(( $(date +%s) - start )) -le 10 ] || fail "a scrape waited more than 10 s behind an idle client"
kill "$idle_pid" 2>/dev/null; idle_pid=

echo "== a port taken: attach refuses before any device changes, start serves without /metrics"
hold "
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', $port + 1)); s.listen()"
truncate -s 32M "$W/ssd2.img" "$W/origin2.img"
expect 2 "--listen 127.0.0.1:$((port + 1))" -- attach --origin "$W/origin2.img" --cache "$W/ssd2.img" --name other \
  --frontend socket --listen "127.0.0.1:$((port + 1))"
[ ! -e "$W/state/other" ] || fail "a refused attach left state"
cmp -s "$W/ssd2.img" <(head -c 32M /dev/zero) || fail "a refused attach wrote to the cache device"
kill "$idle_pid" 2>/dev/null; wait "$idle_pid" 2>/dev/null; idle_pid=

echo "== the endpoint comes back with the cache"
expect 0 "" -- stop vol
curl -s --max-time 5 "$url" >/dev/null && fail "/metrics answered after stop"
hold "
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', $port)); s.listen()"
"$C" start vol >"$W/out" 2>"$W/err" || fail "start with the metrics port taken: $(cat "$W/err")"
grep -q "/metrics is not served" "$W/err" || fail "start did not say /metrics is not served: $(cat "$W/err")"
io vol -c 'read -P 0x5a 0 64k'
kill "$idle_pid" 2>/dev/null; wait "$idle_pid" 2>/dev/null; idle_pid=
expect 0 "" -- stop vol
expect 0 "" -- start vol
curl -sf "$url" | grep -q '^cachectl_up{cache="vol",mode="writeback"} 1$' || fail "/metrics after start"

echo "== docs/usage.md lists every metric, and no other"
grep -o '^# TYPE [a-z_]*' "$W/prom" | awk '{print $3}' | sort >"$W/sent"
sed -n '/<!-- metrics -->/,/<!-- end of metrics -->/p' "$DOC" | grep -o '^| `cachectl_[a-z_]*`' | tr -d '|` ' |
  sort >"$W/documented"
[ -s "$W/documented" ] || fail "docs/usage.md has no metric list"
diff "$W/sent" "$W/documented" >"$W/diff" || fail "metrics (<) against docs/usage.md (>):"$'\n'"$(cat "$W/diff")"

expect 0 "" -- detach vol
finish metrics_test
