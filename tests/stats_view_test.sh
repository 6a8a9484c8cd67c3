#!/usr/bin/env bash
# The human views of stats, checked against a known workload sent through
# the cache's NBD socket by qemu-io: `stats` (figures and percentages),
# `stats --watch` (the interval's rates, by counts), `top --once`, `list`;
# and docs/usage.md's list of stats fields against what the daemon sends.
# Usage: stats_view_test.sh PATH/TO/cachectl PATH/TO/docs/usage.md
set -u
C=$1 DOC=$2
command -v qemu-io >/dev/null || { echo "FAIL: qemu-io is not installed (run scripts/setup.sh)"; exit 1; }
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
watch_pid=
cleanup() {
  [ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
source "$(dirname "$0")/support/cli_lib.sh"
# One qemu-io connection, one request per command: COUNT requests of 64 KiB.
requests() {  # requests read|write FIRST_LINE COUNT
  local args=() i
  for ((i = $2; i < $2 + $3; i++)); do args+=(-c "$1 -P 0x5a $((i * 65536)) 64k"); done
  io vol "${args[@]}"
}
has() { grep -qF -- "$1" "$W/out" || fail "stats lacks '$1':"$'\n'"$(cat "$W/out")"; }

truncate -s 256M "$W/origin.img"
truncate -s 64M "$W/ssd.img"
qemu-io -f raw "$W/origin.img" -c 'write -P 0x5a 0 16M' >/dev/null
expect 0 "" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --mode writeback --line-size 64K
# No stream bypasses the cache, and the cleaner leaves the few dirty lines alone.
expect 0 "" -- set vol --seq-cutoff 0 --dirty-target 50 --dirty-low 60 --dirty-high 80

echo "== a known workload: 16 line writes, 16 reads of them, 8 reads of lines never cached"
requests write 0 16
requests read 0 16
requests read 100 8
expect 0 "" -- stats vol
has "vol: running, writeback, adaptive: small 10 %, T2, ghost 1x (0 switches)"
has "  device               nbd+unix:///?socket=$W/run/vol/nbd"
has "  origin               $W/origin.img, 256.0 MiB"
has "  cache device         $W/ssd.img, 64.0 MiB, lines of 64.0 KiB"
has "  reads                          24 requests    60.0 % of requests"
has "  writes                         16 requests    40.0 % of requests"
has "  bypassed (cutoff)               0 requests     0.0 % of requests"
has "  read, written        1.5 MiB, 1.0 MiB"
has "  read hits                     256 blocks      40.0 % of 4 KiB blocks"
has "  read misses                   128 blocks      20.0 % of 4 KiB blocks"
has "  write hits                      0 blocks       0.0 % of 4 KiB blocks"
has "  write misses                  256 blocks      40.0 % of 4 KiB blocks"
has "  read hit ratio       66.7 %"
has "  hit ratio            40.0 %"
has "errors: none"
has "  sequential cutoff    off"
has "  dirty watermarks     target 50 %, low 60 %, high 80 %"
# Usage in bytes and shares of the capacity the daemon reports.
"$C" stats vol --json >"$W/json"
num() { grep -o "\"$1\": [0-9]*" "$W/json" | head -1 | grep -o '[0-9]*$'; }
capacity=$(num capacity_lines) dirty=$(num dirty_lines)
[ "$dirty" -eq 16 ] || fail "16 lines written in write-back, $dirty dirty"
dirty_pct=$(awk -v d="$dirty" -v c="$capacity" 'BEGIN { printf "%.1f %%", 100 * d / c }')
has "$(printf '  %-20s %12s %9s' dirty "1.0 MiB" "$dirty_pct")"
grep -q '"schema_version": 2, "name": "vol"' "$W/json" || fail "stats --json: no schema_version first: $(cat "$W/json")"

echo "== stats --watch: the interval's rates add up to the workload"
"$C" stats vol --watch 2 >"$W/watch" 2>&1 &
watch_pid=$!
rows() { grep -c '^[0-9][0-9]:' "$W/watch"; }
for _ in $(seq 100); do [ "$(rows)" -ge 1 ] && break; sleep 0.1; done
requests read 0 100  # 100 read requests, the first 16 lines' hits
for _ in $(seq 100); do [ "$(rows)" -ge 3 ] && break; sleep 0.1; done
kill "$watch_pid"; wait "$watch_pid" 2>/dev/null; watch_pid=
head -1 "$W/watch" | grep -q "rd IOPS" || fail "stats --watch: no header: $(cat "$W/watch")"
# rd IOPS x 2 s over the rows: the 100 reads, within the rounding of each row.
reads=$(awk '/^[0-9][0-9]:/ { sum += $2 * 2 } END { print sum }' "$W/watch")
[ "$reads" -ge 97 ] && [ "$reads" -le 103 ] || fail "stats --watch counted $reads reads of 100: $(cat "$W/watch")"
grep -q '^[0-9][0-9]:.*%' "$W/watch" || fail "stats --watch: no interval with a hit ratio: $(cat "$W/watch")"

echo "== top and list"
expect 0 "" -- top --once --interval 0.2
grep -q "^NAME *STATE *MODE *SIZE *USED *DIRTY *RD HIT *IOPS *CLEAN/s *ERRORS" "$W/out" || fail "top: $(cat "$W/out")"
grep -q "^vol  *running  *writeback  *[0-9.]* MiB  *[0-9.]* %  *[0-9.]* %" "$W/out" || fail "top row: $(cat "$W/out")"
expect 0 "" -- list
grep -q "^vol  *running  *writeback  *[0-9.]* MiB  *[0-9.]* %" "$W/out" || fail "list: $(cat "$W/out")"
expect 2 "positive number of seconds" -- top --interval 0
expect 2 "goes with --watch" -- stats vol --cumulative

echo "== an export recorded but not served (as after a reboot) is shown as such"
printf 'nvme_tcp=192.0.2.10:4420\nnqn=nqn.2026-11.org.cachectl:vol\nallowed_hosts=nqn.2014-08.org.nvmexpress:uuid:1\nallow_any_host=0\ndevice=/dev/mapper/vol\nport_id=1\n' \
  >"$W/state/vol/export.conf"
expect 0 "" -- stats vol
has "exported             nvme-tcp 192.0.2.10:4420 as nqn.2026-11.org.cachectl:vol to nqn.2014-08.org.nvmexpress:uuid:1 (recorded, not served now)"
expect 0 "" -- stats vol --json
has '"nvme_export": {"address": "192.0.2.10:4420", "nqn": "nqn.2026-11.org.cachectl:vol", "hosts": "nqn.2014-08.org.nvmexpress:uuid:1", "live": false}'
expect 0 "" -- list
has "+nvme-tcp 192.0.2.10:4420"

echo "== every field stats sends is documented, and no other"
"$C" stats vol --csv | head -1 | tr ',' '\n' | sort >"$W/sent"
sed -n '/<!-- stats fields -->/,/<!-- end of stats fields -->/p' "$DOC" | grep -o '^| `[a-z_.]*`' |
  tr -d '|` ' | sort >"$W/documented"
[ -s "$W/documented" ] || fail "docs/usage.md has no stats field list"
diff "$W/sent" "$W/documented" >"$W/diff" || fail "stats fields (<) against docs/usage.md (>):"$'\n'"$(cat "$W/diff")"

# Not served: detach goes on, and forgets the record.
expect 0 "" -- detach vol
[ ! -e "$W/state/vol" ] || fail "detach left the cache's state"
finish stats_view_test
