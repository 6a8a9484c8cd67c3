#!/bin/sh
# Runs inside the guest: online attach to a device-mapper volume that is
# mounted and being written, over ublk and kernel NBD, in write-through
# and write-back. The writer
# goes on through attach, use, flush and detach and never sees an error;
# then e2fsck is clean and every file it wrote matches its checksum. Bad
# input at the kernel level leaves every table as it was.
set -eu
fail() { echo "FAIL: $*"; exit 1; }
modprobe loop
modprobe ext4
modprobe dm-mod
mkdir -p /data /mnt /plain
mount -t tmpfs -o size=700M tmpfs /data
export CACHECTL_RUN_DIR=/run/cachectl CACHECTL_STATE_DIR=/data/state

writer() {  # writes files and their checksums until /data/stop appears
  n=0
  while [ ! -e /data/stop ]; do
    n=$((n + 1))
    if ! dd if=/dev/urandom of=/mnt/w$n bs=16k count=8 2>/dev/null; then echo "write $n" >> /data/writer.err; fi
    (cd /mnt && sha256sum w$n >> /data/wsums) || echo "sum $n" >> /data/writer.err
    cat /mnt/w$((n / 2 + 1)) > /dev/null 2>&1 || echo "read $n" >> /data/writer.err
  done
}

for frontend in ublk nbd; do
for mode in writethrough writeback; do
  echo "== $frontend, $mode"
  rm -f /data/stop /data/writer.err /data/wsums
  truncate -s 256M /data/vol.img
  truncate -s 64M /data/ssd.img
  losetup /dev/loop0 /data/vol.img
  losetup /dev/loop1 /data/ssd.img
  dmsetup create vol --table "0 524288 linear /dev/loop0 0"
  before=$(dmsetup table vol)
  mkfs.ext4 -q /dev/mapper/vol
  mount /dev/mapper/vol /mnt
  writer &
  wpid=$!
  sleep 1
  cachectl attach --origin /dev/mapper/vol --cache /dev/loop1 --mode $mode --frontend $frontend
  dmsetup table vol | grep -q "linear" || fail "no table: $(dmsetup table vol)"
  [ "$(dmsetup table vol)" != "$before" ] || fail "the volume does not go through the cache"
  dmsetup info cachectl-origin-vol >/dev/null || fail "no hidden origin device"
  sleep 2
  echo 3 > /proc/sys/vm/drop_caches
  (cd /mnt && cat w* > /dev/null)
  cachectl stats vol --json > /data/stats
  grep -q '"read_hits": 0,' /data/stats && fail "no read hits: $(cat /data/stats)"
  grep -q '"dm_device": "/dev/mapper/vol"' /data/stats || fail "stats lacks the volume: $(cat /data/stats)"
  cachectl flush vol
  cachectl detach vol
  [ "$(dmsetup table vol)" = "$before" ] || fail "the volume's table is not back: $(dmsetup table vol)"
  dmsetup info cachectl-origin-vol >/dev/null 2>&1 && fail "the hidden origin device is still there"
  sleep 1
  touch /data/stop
  wait $wpid
  [ -e /data/writer.err ] && fail "the writer saw errors: $(cat /data/writer.err)"
  umount /mnt
  e2fsck -fn /dev/mapper/vol || fail "e2fsck"
  mount -o ro /dev/mapper/vol /mnt
  (cd /mnt && sha256sum -c /data/wsums > /dev/null) || fail "checksums differ"
  echo "writer wrote $(wc -l < /data/wsums) files, all intact"
  umount /mnt
  dmsetup remove vol
  losetup -d /dev/loop0
  losetup -d /dev/loop1
  rm -f /data/vol.img /data/ssd.img
done
done

echo "== stop, a write around the cache, start: no stale read"
# While the cache is stopped the volume has its own table and is written
# directly; what the cache held of it before is older than the volume.
truncate -s 64M /data/vol.img /data/ssd.img
losetup /dev/loop0 /data/vol.img
losetup /dev/loop1 /data/ssd.img
dmsetup create sv --table "0 131072 linear /dev/loop0 0"
dd if=/dev/urandom of=/data/x bs=1M count=4 2>/dev/null
dd if=/data/x of=/dev/mapper/sv bs=1M oflag=direct conv=fsync 2>/dev/null
cachectl attach --origin /dev/mapper/sv --cache /dev/loop1 --mode writeback --frontend nbd >/dev/null
for pass in 1 2; do dd if=/dev/mapper/sv of=/dev/null bs=1M count=4 iflag=direct 2>/dev/null; done
cachectl stats sv --json | grep -q '"read_hits": 0,' && fail "the volume's blocks were not cached"
cachectl stop sv
dd if=/dev/urandom of=/data/y bs=1M count=4 2>/dev/null
dd if=/data/y of=/dev/mapper/sv bs=1M oflag=direct conv=fsync 2>/dev/null
cachectl start sv >/dev/null
[ "$(dd if=/dev/mapper/sv bs=1M count=4 iflag=direct 2>/dev/null | sha256sum)" = "$(sha256sum < /data/y)" ] ||
  fail "after stop and start the volume reads data older than what was written while the cache was stopped"
cachectl detach sv >/dev/null
[ "$(dd if=/dev/mapper/sv bs=1M count=4 iflag=direct 2>/dev/null | sha256sum)" = "$(sha256sum < /data/y)" ] ||
  fail "after detach the volume lost what was written while the cache was stopped"
dmsetup remove sv
losetup -d /dev/loop0
losetup -d /dev/loop1
rm -f /data/vol.img /data/ssd.img

echo "== bad input"
truncate -s 64M /data/plain.img /data/ssd.img /data/v.img
losetup /dev/loop2 /data/plain.img
losetup /dev/loop1 /data/ssd.img
losetup /dev/loop0 /data/v.img
mkfs.ext4 -q /dev/loop2
mount /dev/loop2 /plain
if cachectl attach --origin /dev/loop2 --cache /dev/loop1 --name plain 2>/data/err; then fail "attached a mounted plain disk"; fi
grep -q "cannot be cached online: unmount it, attach, then mount /dev/mapper/NAME" /data/err || fail "plain disk: $(cat /data/err)"
umount /plain
if cachectl attach --origin /dev/mapper/nope --cache /dev/loop1 2>/data/err; then fail "attached a missing volume"; fi
grep -q "does not exist" /data/err || fail "missing volume: $(cat /data/err)"
dmsetup create v --table "0 131072 linear /dev/loop0 0"
table=$(dmsetup table v)
cachectl attach --origin /dev/mapper/v --cache /dev/loop1 --frontend nbd >/dev/null
if cachectl attach --origin /dev/mapper/v --cache /dev/loop2 --name v2 2>/data/err; then fail "attached the same volume twice"; fi
grep -q "is cached already" /data/err || fail "twice: $(cat /data/err)"
cachectl detach v >/dev/null
[ "$(dmsetup table v)" = "$table" ] || fail "the table changed: $(dmsetup table v)"
# A failure partway (here the engine refuses the origin's size) leaves the
# volume as it was and no hidden device behind.
dmsetup create odd --table "0 131071 linear /dev/loop0 0"
table=$(dmsetup table odd)
if cachectl attach --origin /dev/mapper/odd --cache /dev/loop1 --frontend nbd 2>/data/err; then fail "attached an odd-sized volume"; fi
grep -q "not a multiple of 4 KiB" /data/err || fail "odd size: $(cat /data/err)"
[ "$(dmsetup table odd)" = "$table" ] || fail "the odd volume's table changed"
dmsetup info cachectl-origin-odd >/dev/null 2>&1 && fail "a failed attach left its hidden device"
dmsetup info odd | grep -q "State: *ACTIVE" || fail "the odd volume is not active: $(dmsetup info odd)"
echo "online_attach_test: all passed"
