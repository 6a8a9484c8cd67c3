#!/bin/sh
# Runs inside the guest (tests/guest/guest.sh): the cached volume as a
# kernel block device. For ublk and kernel NBD (netlink and ioctls), write-through and
# write-back: attach, /dev/mapper/vol appears over the kernel device; ext4 on it, files with
# recorded checksums; ext4's FUA writes and flushes reach the engine as such;
# stop is refused while mounted; unmount, detach; the origin alone passes
# e2fsck and holds every file.
set -eu
fail() { echo "FAIL: $*"; exit 1; }
modprobe loop
modprobe ext4
mkdir -p /data /mnt
mount -t tmpfs -o size=700M tmpfs /data
export CACHECTL_RUN_DIR=/run/cachectl CACHECTL_STATE_DIR=/data/state

for frontend in ublk nbd nbd-ioctl; do
for mode in writethrough writeback; do
  echo "== $frontend, $mode"
  truncate -s 256M /data/origin.img
  truncate -s 64M /data/ssd.img
  losetup /dev/loop0 /data/origin.img
  losetup /dev/loop1 /data/ssd.img
  # nbd-ioctl: kernel NBD through its older ioctl interface
  CACHECTL_NBD_IOCTL=$([ $frontend = nbd-ioctl ] && echo 1 || echo 0) \
    cachectl attach --origin /dev/loop0 --cache /dev/loop1 --name vol --mode $mode --frontend ${frontend%-ioctl}
  [ -b /dev/mapper/vol ] || fail "/dev/mapper/vol is missing"
  cachectl list | grep -q "/dev/mapper/vol" || fail "list does not show the dm device"
  mkfs.ext4 -q /dev/mapper/vol
  mount /dev/mapper/vol /mnt
  i=1
  while [ $i -le 6 ]; do
    dd if=/dev/urandom of=/mnt/file$i bs=64k count=$((i * 20)) 2>/dev/null
    i=$((i + 1))
  done
  (cd /mnt && sha256sum file* > /data/sums)
  sync
  echo 3 > /proc/sys/vm/drop_caches
  (cd /mnt && sha256sum -c /data/sums >/dev/null) || fail "files differ through the cache"
  if cachectl stop vol 2>/data/err; then fail "stop succeeded while mounted"; fi
  grep -q "is in use" /data/err || fail "stop while mounted: $(cat /data/err)"
  umount /mnt
  cachectl stats vol --json > /data/stats
  grep -q '"read_hits": 0,' /data/stats && fail "no read hits: $(cat /data/stats)"
  grep -q "\"frontend\": \"${frontend%-ioctl}\"" /data/stats || fail "front end: $(cat /data/stats)"
  grep -q '"kernel_device": "/dev/\(nbd\|ublkb\)' /data/stats || fail "stats lacks the kernel device"
  # ext4's journal commits are written with FUA (jbd2, barriers on), and the
  # device advertises FUA, so the kernel sends them on as FUA writes: they
  # must reach the engine as such, not as plain writes acknowledged unsynced.
  echo "requests: $(grep -o '"requests": {[^}]*}' /data/stats)"
  grep -q '"fua_writes": [1-9]' /data/stats || fail "no FUA write reached the engine: $(cat /data/stats)"
  grep -q '"flushes": [1-9]' /data/stats || fail "no flush reached the engine: $(cat /data/stats)"
  cachectl detach vol
  [ -e /dev/mapper/vol ] && fail "/dev/mapper/vol is still there after detach"
  losetup -d /dev/loop0
  losetup -d /dev/loop1
  losetup /dev/loop2 /data/origin.img
  e2fsck -fn /dev/loop2 || fail "e2fsck on the origin alone"
  mount -o ro /dev/loop2 /mnt
  (cd /mnt && sha256sum -c /data/sums >/dev/null) || fail "the origin alone lacks the files"
  umount /mnt
  losetup -d /dev/loop2
  rm -f /data/origin.img /data/ssd.img
done
done
echo "kernel_device_test: all passed"
