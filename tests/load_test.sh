#!/usr/bin/env bash
# Load: ten fio clients (one NBD connection each) write with verification
# over far more than the cache holds, in write-back, while management
# commands come in. A flush is held in its middle (CACHECTL_PAUSE_AT) and
# stats and set must answer while it waits: they never queue behind it.
# Afterwards: no client saw an error, every block verified, the cleaner
# and evictions moved data, and the flush ended.
# Usage: load_test.sh PATH/TO/cachectl
set -u
C=$1
command -v fio >/dev/null || { echo "FAIL: fio is not installed (run scripts/setup.sh)"; exit 1; }
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
fio_pid= flush_pid=
cleanup() {
  [ -n "$fio_pid" ] && kill "$fio_pid" 2>/dev/null
  [ -n "$flush_pid" ] && kill "$flush_pid" 2>/dev/null
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# 320 MiB of volume, 32 MiB of cache: the clients write ten times the cache.
truncate -s 320M "$W/origin.img"
truncate -s 33M "$W/ssd.img"
CACHECTL_PAUSE_AT=flush-4-batch-done:4 "$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" \
  --name vol --mode writeback --line-size 4K --frontend socket >/dev/null || { echo "FAIL: attach"; exit 1; }
"$C" set vol --seq-cutoff 0 --dirty-high 90 --dirty-low 70 >/dev/null || fail "set"

# Each client writes its own 32 MiB at random (4K to 64K), then reads it all
# back and checks every block's checksum and header.
fio --aux-path="$W" --name=load --ioengine=nbd --uri="nbd+unix:///vol?socket=$W/run/vol/nbd" --rw=randwrite \
    --bsrange=4k-64k --size=32M --offset_increment=32M --numjobs=10 --iodepth=4 \
    --verify=crc32c --verify_fatal=1 --do_verify=1 --group_reporting >"$W/fio.out" 2>&1 &
fio_pid=$!

# Wait until the clients have filled the cache, then flush: the flush pauses
# 4 s after its first batch is clean (the background cleaner never pauses).
for _ in $(seq 300); do
  promotions=$("$C" stats vol --json 2>/dev/null | grep -o '"promotions": [0-9]*' | grep -o '[0-9]*$')
  [ "${promotions:-0}" -gt 9000 ] && break
  sleep 0.1
done
"$C" flush vol >"$W/flush.out" 2>&1 &
flush_pid=$!
for _ in $(seq 100); do grep -q "pausing at step" "$W/state/vol/daemon.log" && break; sleep 0.05; done
grep -q "pausing at step" "$W/state/vol/daemon.log" || fail "the flush never reached its first batch"

answered=0
for i in 1 2 3; do
  "$C" stats vol --json >"$W/stats.out" 2>&1 || fail "stats during the flush: $(cat "$W/stats.out")"
  "$C" set vol --seq-cutoff $((i * 64))K >/dev/null 2>&1 || fail "set during the flush"
  kill -0 "$flush_pid" 2>/dev/null && answered=$((answered + 1))
done
[ $answered -eq 3 ] || fail "stats and set answered only $answered of 3 times while the flush was running"

wait "$flush_pid" || fail "flush: $(cat "$W/flush.out")"
flush_pid=
wait "$fio_pid" || fail "fio: $(tail -20 "$W/fio.out")"
fio_pid=
grep -q "err= 0" "$W/fio.out" || fail "fio reported errors: $(grep err= "$W/fio.out")"
grep -qi "verify.*fail\|bad magic\|crc32c.*mismatch" "$W/fio.out" && fail "fio verification failed"

"$C" stats vol --json >"$W/stats.out"
num() { grep -o "\"$1\": [0-9]*" "$W/stats.out" | head -1 | grep -o '[0-9]*$'; }
[ "$(num evictions)" -gt 0 ] || fail "no evictions: $(cat "$W/stats.out")"
[ "$(num cleaner_writes)" -gt 0 ] || fail "the cleaner moved nothing: $(cat "$W/stats.out")"
"$C" detach vol >/dev/null || fail "detach"

[ $failures -eq 0 ] && echo "PASS: 10 clients, $(( 320 / 33 ))x the cache, management commands answered during a flush" ||
  { echo "$failures failures"; exit 1; }
