#!/usr/bin/env bash
# The RAM tier from the command line, with real files and qemu-io over the
# NBD socket: attach --ram-cache; data read twice comes from RAM the third
# time (stats, Prometheus), and reads back right after it is rewritten;
# set --ram-cache changes it while clients run and the size survives a
# restart (the tier starts empty); a wrong size is one line and changes
# nothing; advise and replay show the two-level cache.
#
#   ram_tier_cli_test.sh CACHECTL
set -uo pipefail
C=$(readlink -f "$1")
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cleanup() {
  for n in $(ls "$W/state" 2>/dev/null); do
    pid=$(cat "$W/run/$n/pid" 2>/dev/null) && kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$W"
}
trap cleanup EXIT
cd "$W" || exit 1
command -v qemu-io >/dev/null || { echo "FAIL: qemu-io is not installed (scripts/setup.sh installs it)"; exit 1; }
truncate -s 64M origin.img
truncate -s 32M ssd.img
uri() { echo "nbd+unix:///$1?socket=$W/run/$1/nbd"; }
io() { qemu-io -f raw "$(uri ram)" "$@" >io.out 2>&1 && ! grep -q "verification failed\|error" io.out; }
field() { "$C" stats ram --json | grep -o "\"$1\": [0-9.]*" | head -1 | awk '{print $2}'; }

expect() {  # exit status, words, command...
  local want=$1 words=$2; shift 2
  "$C" "$@" >out 2>&1; local got=$?
  [ "$got" = "$want" ] || fail "'$*' exited $got, not $want: $(cat out)"
  grep -q -- "$words" out || fail "'$*' does not say '$words': $(cat out)"
  [ "$(wc -l <out)" = 1 ] || fail "'$*' printed more than one line: $(cat out)"
}

echo "== a wrong size: one line, no cache made"
expect 2 "at least 4M" attach --origin origin.img --cache ssd.img --name ram --frontend socket --ram-cache 1M
expect 2 "three quarters of this host's" attach --origin origin.img --cache ssd.img --name ram --frontend socket \
  --ram-cache 64T
expect 2 "a size such as" attach --origin origin.img --cache ssd.img --name ram --frontend socket --ram-cache lots
[ -e "$W/state/ram" ] && fail "a refused attach left a state directory"
[ "$(head -c 4096 ssd.img | tr -d '\0' | wc -c)" = 0 ] || fail "a refused attach wrote to the cache device"

echo "== attach --ram-cache, reads from RAM"
"$C" attach --origin origin.img --cache ssd.img --name ram --frontend socket --mode writeback --ram-cache 16M \
  >out 2>&1 || { cat out; echo "FAIL: attach"; exit 1; }
[ "$(field ram_cache_bytes)" = 16777216 ] || fail "stats ram_cache_bytes: $(field ram_cache_bytes)"
"$C" set ram --seq-cutoff 0 >/dev/null || fail "set --seq-cutoff 0"  # qemu-io's long reads are a stream
io -c 'write -P 0x5a 0 4M' -c flush || fail "write: $(tail -2 io.out)"
# A write caches the data; the first read is a cache hit that fills the
# tier, the next two come from RAM.
io -c 'read -P 0x5a 0 4M' -c 'read -P 0x5a 0 4M' -c 'read -P 0x5a 0 4M' || fail "read: $(tail -2 io.out)"
hits=$(field ram_hits)
[ "${hits:-0}" -ge 2048 ] || fail "two reads of 4 MiB from RAM are 2048 blocks, ram_hits says ${hits:-none}"
[ "$(field ram_used_bytes)" = 4194304 ] || fail "ram_used_bytes: $(field ram_used_bytes)"
"$C" stats ram >out 2>&1 || fail "stats"
grep -q "RAM tier hits" out || fail "stats does not show the RAM tier's hits: $(cat out)"
grep -q "RAM tier .*16.0 MiB" out || fail "stats does not show the RAM tier's size: $(cat out)"
"$C" stats ram --prometheus >out 2>&1 || fail "stats --prometheus"
grep -q '^cachectl_ram_hits_total{cache="ram",mode="writeback"} [1-9]' out || fail "no cachectl_ram_hits_total: $(grep ram out)"
grep -q '^# TYPE cachectl_ram_hit_ratio gauge' out || fail "no cachectl_ram_hit_ratio gauge"

echo "== a rewrite is read back, not the RAM copy"
io -c 'write -P 0x6b 1M 64k' -c 'read -P 0x6b 1M 64k' -c 'read -P 0x5a 0 1M' -c 'read -P 0x6b 1M 64k' ||
  fail "rewrite then read: $(tail -2 io.out)"
io -c 'write -P 0x7c 2M 512' -c 'read -P 0x7c 2M 512' -c 'read -P 0x5a 2097664 3584' ||
  fail "a sector rewritten inside a block held in RAM: $(tail -2 io.out)"
io -c 'discard 3M 64k' -c 'read -P 0 3M 64k' || fail "a trimmed range reads zeros from the origin: $(tail -2 io.out)"

echo "== set --ram-cache while a client runs; kept across a restart"
(qemu-io -f raw "$(uri ram)" -c 'read -P 0x5a 0 1M' -c 'read -P 0x5a 0 1M' -c 'read -P 0x5a 0 1M' >bg.out 2>&1 &
  echo $! >bg.pid)
expect 2 "at least 4M" set ram --ram-cache 2M
[ "$(field ram_cache_bytes)" = 16777216 ] || fail "a refused set changed the size"
# A client other than the CLI: the daemon checks the size before it changes anything.
python3 - "$W/run/ram/control" >raw.out 2>&1 <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"cachectl/2 set dirty_target=5 ram_cache=1048576\n")
print(s.recv(4096).decode().strip())
PY
grep -q "at least 4M" raw.out || fail "a raw set with a RAM tier of 1 MiB: $(cat raw.out)"
[ "$(field dirty_target_pct)" = 10 ] || fail "a refused raw set changed the dirty target: $(field dirty_target_pct)"
"$C" set ram --ram-cache 32M >out 2>&1 || fail "set --ram-cache 32M: $(cat out)"
wait "$(cat bg.pid)" 2>/dev/null
grep -q "verification failed\|error" bg.out && fail "the client during the resize: $(tail -2 bg.out)"
[ "$(field ram_cache_bytes)" = 33554432 ] || fail "set --ram-cache 32M: $(field ram_cache_bytes)"
"$C" stop ram >/dev/null && "$C" start ram >/dev/null 2>&1 || fail "stop and start"
[ "$(field ram_cache_bytes)" = 33554432 ] || fail "the size was not kept: $(field ram_cache_bytes)"
[ "$(field ram_used_bytes)" = 0 ] || fail "the tier does not start empty: $(field ram_used_bytes)"
io -c 'read -P 0x5a 0 1M' -c 'read -P 0x5a 0 1M' -c 'read -P 0x6b 1M 64k' || fail "after the restart: $(tail -2 io.out)"
[ "$(field ram_hits)" -gt 0 ] || fail "no RAM hits after the restart"
"$C" set ram --ram-cache off >/dev/null || fail "set --ram-cache off"
[ "$(field ram_cache_bytes)" = 0 ] || fail "set --ram-cache off: $(field ram_cache_bytes)"
"$C" stats ram >out 2>&1
grep -q "RAM tier .*off" out || fail "stats does not say the tier is off: $(cat out)"
"$C" detach ram >/dev/null || fail "detach"
qemu-io -f raw -c 'read -P 0x5a 0 1M' -c 'read -P 0x6b 1M 64k' origin.img >io.out 2>&1 &&
  ! grep -q "verification failed" io.out || fail "the origin after detach: $(tail -2 io.out)"

echo "== the two-level cache in advise and replay"
{
  echo "ts_us,op,offset_bytes,length_bytes"
  for round in 1 2 3 4; do
    for b in $(seq 0 1023); do echo "$round$b,R,$((b * 4096)),4096"; done
  done
} > trace.csv
"$C" advise --trace trace.csv --ram-cache 8M --json >out 2>&1 || fail "advise --ram-cache: $(cat out)"
grep -q '"ram_cache_bytes": 8388608' out || fail "advise --json does not give the RAM size"
grep -q '"ram_hit_ratio": 0\.[1-9]' out || fail "advise shows no reads from RAM: $(head -c 400 out)"
"$C" advise --trace trace.csv --ram-cache 8M >out 2>&1 && grep -q "reads from RAM" out || fail "advise's table"
"$C" replay --trace trace.csv --cache-size 100% --ram-cache 8M --json >out 2>&1 || fail "replay --ram-cache: $(cat out)"
grep -q '"ram_hits": [1-9]' out || fail "replay shows no RAM hits: $(cat out)"
expect 2 "at least 4M" replay --trace trace.csv --cache-size 10% --ram-cache 1M

[ $failures = 0 ] && echo "ram_tier_cli_test: all passed"
exit $((failures > 0))
