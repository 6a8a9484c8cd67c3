#!/usr/bin/env bash
# pin, unpin, pins, set --placement-window and stats --movement end to end:
# a daemon on sparse files, used through its NBD socket by qemu-io. Bad
# input gets one line and its exit code, and no device changes; pins are
# filled in the background, survive a flood of other reads and a restart.
# Usage: placement_cli_test.sh PATH/TO/cachectl
set -u
C=$1
for tool in qemu-io setpriv; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed (run scripts/setup.sh)"; exit 1; }
done
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
cleanup() {
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
source "$(dirname "$0")/support/cli_lib.sh"

# A JSON number field of the last output.
field() { grep -o "\"$1\": [0-9]*" "$W/out" | head -1 | grep -o '[0-9]*$'; }
# Waits (20 s at most) until every pinned byte is in the cache.
wait_resident() {
  for _ in $(seq 100); do
    "$C" pins vol --json >"$W/out" 2>&1
    [ "$(field pinned_bytes)" = "$(field resident_bytes)" ] && return 0
    sleep 0.2
  done
  fail "pins never became resident: $(cat "$W/out")"
}

truncate -s 256M "$W/origin.img"
truncate -s 64M "$W/ssd.img"
qemu-io -f raw "$W/origin.img" -c 'write -P 0x42 0 8M' >/dev/null
expect 0 "" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol

echo "== bad input"
expect 2 "the option '--range' is required" -- pin vol
expect 2 "expected OFFSET:LENGTH" -- pin vol --range 5
expect 2 "the length is 0" -- pin vol --range 0:0
expect 2 "unknown size suffix" -- pin vol --range 0:1Q
expect 2 "beyond the volume" -- pin vol --range 255M:2M
expect 4 "more than the limit of 31 MiB" -- pin vol --range 0:40M
expect 3 "no cache named 'nope'" -- pin nope --range 0:1M
expect 3 "nothing in that range is pinned" -- unpin vol --range 100M:1M
expect 2 "expected HH:MM-HH:MM" -- set vol --placement-window 1-2
expect 2 "hours are 00-23" -- set vol --placement-window 25:00-01:00
expect 2 "the window is empty" -- set vol --placement-window 03:00-03:00
expect 2 "above 0" -- set vol --placement-rate 0
expect 2 "goes with --json only" -- stats vol --movement --csv
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups env -u CACHECTL_RUN_DIR -u CACHECTL_STATE_DIR \
      "$C" pin vol --range 0:1M 2>&1)
rc=$?
[ $rc -eq 4 ] && echo "$out" | grep -q "permission denied" || fail "non-root pin: exit $rc: $out"
expect 0 "" -- pins vol --json
[ "$(field pinned_bytes)" = 0 ] || fail "a refused pin pinned something: $(cat "$W/out")"

echo "== pin: filled in the background, kept through a flood of reads"
expect 0 "" -- stats vol --json
grep -q '"placement_window": "off"' "$W/out" || fail "placement is not off by default: $(cat "$W/out")"
expect 0 "" -- set vol --seq-cutoff 0                # qemu-io's long reads count as heat, and flood the cache
expect 0 "" -- pin vol --range 0:8M
grep -q "pinned 0:8M on vol; 8.0 MiB pinned of a 31.5 MiB limit" "$W/out" || fail "pin output: $(cat "$W/out")"
wait_resident
io vol -c 'read 64M 192M'                          # three times the cache, other data
expect 0 "" -- pins vol --json
[ "$(field resident_bytes)" = $((8 << 20)) ] || fail "pinned data was evicted: $(cat "$W/out")"
expect 0 "" -- stats vol --json
hits=$(field read_hits)
io vol -c 'read -P 0x42 0 8M' -c 'read -P 0x42 0 8M'
expect 0 "" -- stats vol --json
[ $(($(field read_hits) - hits)) -eq 4096 ] || fail "reading the pinned range was not all hits: $(cat "$W/out")"
expect 0 "" -- pins vol
grep -q "^0:8388608 *8.0 MiB *100.0 %" "$W/out" || fail "pins table: $(cat "$W/out")"

echo "== placement window and movement"
expect 0 "" -- set vol --placement-window 22:30-04:00 --placement-rate 128M
expect 0 "" -- stats vol --json
grep -q '"placement_window": "22:30-04:00", "placement_rate": 134217728' "$W/out" || fail "set placement: $(cat "$W/out")"
expect 0 "" -- set vol --placement-rate 96M          # the window stays
expect 0 "" -- stats vol --json
grep -q '"placement_window": "22:30-04:00", "placement_rate": 100663296' "$W/out" || fail "rate alone: $(cat "$W/out")"
expect 0 "" -- stats vol --movement --json
[ "$(grep -o '"hour_start"' "$W/out" | wc -l)" -eq 24 ] || fail "movement: not 24 hours: $(cat "$W/out")"
last=$(grep -o '"pin_fills": [0-9]*' "$W/out" | tail -1 | grep -o '[0-9]*$')
[ "${last:-0}" -ge 128 ] || fail "movement: this hour's pin fills: ${last:-none}"
grep -q '"hottest": \[{"offset": 0,' "$W/out" || fail "movement: the pinned range, read most, is not the hottest: $(cat "$W/out")"
expect 0 "" -- stats vol --movement
grep -q "^HOUR (local)" "$W/out" && grep -q "^hottest regions" "$W/out" || fail "movement table: $(cat "$W/out")"

echo "== pins and settings survive stop and start"
expect 0 "" -- stop vol
expect 0 "" -- start vol
expect 0 "" -- pins vol --json
grep -q '"ranges": \[{"offset": 0, "length": 8388608, "resident_bytes": 8388608}\]' "$W/out" || \
  fail "pins after restart: $(cat "$W/out")"
expect 0 "" -- stats vol --json
grep -q '"placement_window": "22:30-04:00"' "$W/out" || fail "window after restart: $(cat "$W/out")"
expect 0 "" -- unpin vol --range 0:4M
expect 0 "" -- pins vol --json
grep -q '"ranges": \[{"offset": 4194304, "length": 4194304' "$W/out" || fail "unpin: $(cat "$W/out")"
expect 0 "" -- set vol --placement-window off
expect 0 "" -- detach vol
qemu-io -f raw "$W/origin.img" -c 'read -P 0x42 0 8M' >/dev/null 2>&1 || fail "origin changed"

finish placement_cli_test
