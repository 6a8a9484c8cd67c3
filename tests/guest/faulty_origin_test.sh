#!/bin/sh
# Runs inside the guest: a slow origin (dm-delay) and a failing one
# (dm-flakey). Cached reads of the slow one are hits; the failing one's
# errors reach the client as I/O errors, flush fails and says so, and the
# dirty data stays on the cache until the origin works again.
set -eu
fail() { echo "FAIL: $*"; exit 1; }
modprobe loop
modprobe dm-mod
modprobe dm-delay
modprobe dm-flakey
mkdir -p /data
mount -t tmpfs -o size=400M tmpfs /data
export CACHECTL_RUN_DIR=/run/cachectl CACHECTL_STATE_DIR=/data/state
truncate -s 64M /data/a.img /data/b.img /data/ssd1.img /data/ssd2.img
losetup /dev/loop0 /data/a.img
losetup /dev/loop1 /data/b.img
losetup /dev/loop2 /data/ssd1.img
losetup /dev/loop3 /data/ssd2.img
sectors=131072

echo "== slow origin (dm-delay, 50 ms)"
dmsetup create slow --table "0 $sectors delay /dev/loop0 0 50"
cachectl attach --origin /dev/mapper/slow --cache /dev/loop2 --frontend nbd >/dev/null
cachectl set slow --seq-cutoff 0 >/dev/null
dd if=/dev/mapper/slow of=/dev/null bs=64k count=16 iflag=direct 2>/dev/null
cachectl stats slow --reset >/dev/null
dd if=/dev/mapper/slow of=/dev/null bs=64k count=16 iflag=direct 2>/dev/null
cachectl stats slow --json > /data/stats
grep -q '"read_hits": 256, "read_misses": 0,' /data/stats || fail "the second read was not all hits: $(cat /data/stats)"
cachectl detach slow >/dev/null

echo "== failing origin (dm-flakey, always down)"
dmsetup create flaky --table "0 $sectors flakey /dev/loop1 0 0 3600"
cachectl attach --origin /dev/mapper/flaky --cache /dev/loop3 --mode writeback --frontend nbd >/dev/null
if dd if=/dev/mapper/flaky of=/dev/null bs=4k count=1 skip=100 iflag=direct 2>/dev/null; then
  fail "a read of the failing origin succeeded"
fi
printf 'cachectl-dirty-data' | dd of=/dev/mapper/flaky bs=4k count=1 seek=10 conv=sync oflag=direct 2>/dev/null \
  || fail "a write-back write failed although the cache works"
if cachectl flush flaky 2>/data/err; then fail "flush succeeded against a failing origin"; fi
grep -q "i/o error\|I/O error\|error" /data/err || fail "flush error: $(cat /data/err)"
cachectl stats flaky --json > /data/stats
grep -q '"dirty_lines": 0,' /data/stats && fail "the dirty data was dropped"
grep -q '"origin": {"read": 0,' /data/stats && fail "origin read errors not counted: $(cat /data/stats)"
dd if=/dev/mapper/flaky bs=4k count=1 skip=10 iflag=direct 2>/dev/null | grep -q cachectl-dirty-data \
  || fail "the dirty block is not served from the cache"
echo "-- the disk comes back"
dmsetup suspend cachectl-origin-flaky
dmsetup reload cachectl-origin-flaky --table "0 $sectors linear /dev/loop1 0"
dmsetup resume cachectl-origin-flaky
cachectl flush flaky >/dev/null || fail "flush after the origin came back"
cachectl detach flaky >/dev/null
dd if=/dev/loop1 bs=4k count=1 skip=10 2>/dev/null | grep -q cachectl-dirty-data || fail "the origin lacks the data"
echo "faulty_origin_test: all passed"
