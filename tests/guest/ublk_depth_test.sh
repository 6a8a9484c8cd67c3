#!/bin/sh
# Runs inside the guest (tests/guest/guest.sh): the kernel device over ublk
# runs at the depth it advertises. fio reads /dev/mapper/vol at depth 64
# (data written first, so reads hit and are served on the queue's reactor;
# misses would count too) and the engine's own count of requests in flight
# (requests.peak_in_flight in cachectl stats) must reach at least 32. The
# thread-per-request front end it replaces never had more than 2. Timing
# means nothing under the emulator; the count does.
set -eu
fail() { echo "FAIL: $*"; exit 1; }
modprobe loop
mkdir -p /data
mount -t tmpfs -o size=400M tmpfs /data
export CACHECTL_RUN_DIR=/run/cachectl CACHECTL_STATE_DIR=/data/state
truncate -s 128M /data/origin.img
truncate -s 128M /data/ssd.img
losetup /dev/loop0 /data/origin.img
losetup /dev/loop1 /data/ssd.img
cachectl attach --origin /dev/loop0 --cache /dev/loop1 --name vol --mode writeback --frontend ublk \
  --line-size 4K
cachectl set vol --seq-cutoff 0 >/dev/null
[ -b /dev/mapper/vol ] || fail "/dev/mapper/vol is missing"
fio --name=fill --thread --filename=/dev/mapper/vol --direct=1 --ioengine=libaio --iodepth=16 \
  --rw=write --bs=64k --size=32M >/data/fill.log 2>&1 || { cat /data/fill.log; fail "fio fill"; }
cachectl stats vol --reset >/dev/null
fio --name=depth --thread --filename=/dev/mapper/vol --direct=1 --ioengine=libaio --iodepth=64 \
  --iodepth_batch_submit=64 --rw=randread --bs=4k --size=32M --number_ios=20000 \
  >/data/depth.log 2>&1 || { cat /data/depth.log; fail "fio at depth 64"; }
grep -E "IOPS|lat \(" /data/depth.log | head -3
cachectl stats vol --json >/data/stats
peak=$(grep -o '"peak_in_flight": [0-9]*' /data/stats | awk '{print $2}')
hits=$(grep -o '"read_hits": [0-9]*' /data/stats | awk '{print $2}')
echo "peak requests in flight in the engine: ${peak:-none}; read hits: ${hits:-none}"
[ -n "$peak" ] || fail "stats has no requests.peak_in_flight: $(cat /data/stats)"
[ "$peak" -ge 32 ] || fail "at most $peak requests were in flight at once (fio asked for 64)"
[ "${hits:-0}" -gt 0 ] || fail "no read hits: $(cat /data/stats)"
cachectl detach vol
[ -e /dev/mapper/vol ] && fail "/dev/mapper/vol is still there after detach"
losetup -d /dev/loop0
losetup -d /dev/loop1
echo "ublk_depth_test: all passed"
