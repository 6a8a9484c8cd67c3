#!/bin/sh
# Runs inside the guest: one SSD for several volumes, over ublk and kernel
# NBD, in write-back.
#  - Two device-mapper volumes, each with a mounted ext4 and a writer, are
#    cached online on one SSD: the first by attach, the second by add.
#  - A third volume, not in use, is added and served as /dev/mapper/VOLUME;
#    remove is refused while it is open, then takes it away with its data
#    on its origin.
#  - kill -9 of the daemon: start takes each volume's kernel device back
#    and the writers see no error.
#  - The second online volume is removed while both writers go on: it has
#    its own table again and its writer never notices.
#  - Detach; e2fsck is clean on both and every file either writer wrote
#    matches its checksum.
set -eu
fail() { echo "FAIL: $*"; dmesg | tail -20; exit 1; }
modprobe loop
modprobe ext4
modprobe dm-mod
mkdir -p /data /mnt/va /mnt/vb
mount -t tmpfs -o size=900M tmpfs /data
export CACHECTL_RUN_DIR=/run/cachectl CACHECTL_STATE_DIR=/data/state

writer() {  # $1: a volume; writes files and their checksums until /data/stop appears
  n=0
  while [ ! -e /data/stop ]; do
    n=$((n + 1))
    dd if=/dev/urandom of=/mnt/$1/w$n bs=16k count=8 2>/dev/null || echo "write $n" >> /data/$1.err
    (cd /mnt/$1 && sha256sum w$n >> /data/$1.sums) || echo "sum $n" >> /data/$1.err
    cat /mnt/$1/w$((n / 2 + 1)) > /dev/null 2>&1 || echo "read $n" >> /data/$1.err
  done
}

first8m() { dd if="$1" bs=1M count=8 iflag=direct 2>/dev/null | sha256sum; }

for frontend in ublk nbd; do
  echo "== $frontend"
  rm -f /data/stop /data/*.err /data/*.sums
  truncate -s 256M /data/a.img /data/b.img
  truncate -s 64M /data/c.img /data/ssd.img
  losetup /dev/loop0 /data/a.img
  losetup /dev/loop1 /data/b.img
  losetup /dev/loop2 /data/ssd.img
  losetup /dev/loop3 /data/c.img
  dmsetup create va --table "0 524288 linear /dev/loop0 0"
  dmsetup create vb --table "0 524288 linear /dev/loop1 0"
  table_b=$(dmsetup table vb)
  for v in va vb; do
    mkfs.ext4 -q /dev/mapper/$v
    mount /dev/mapper/$v /mnt/$v
  done
  writer va &
  pa=$!
  writer vb &
  pb=$!
  sleep 1

  cachectl attach --origin /dev/mapper/va --cache /dev/loop2 --name ssd --mode writeback --frontend $frontend
  cachectl add ssd --origin /dev/mapper/vb --volume b > /data/out || fail "add b: $(cat /data/out)"
  grep -q "block device: /dev/mapper/vb" /data/out || fail "add b: $(cat /data/out)"
  [ "$(dmsetup table vb)" != "$table_b" ] || fail "vb does not go through the cache"
  dmsetup info "cachectl-origin-ssd+b" > /dev/null || fail "no hidden origin device for vb"

  echo "-- a volume not in use: /dev/mapper/vc"
  cachectl add ssd --origin /dev/loop3 --volume vc > /data/out || fail "add vc: $(cat /data/out)"
  grep -q "block device: /dev/mapper/vc" /data/out || fail "add vc: $(cat /data/out)"
  dd if=/dev/urandom of=/data/c.pattern bs=1M count=8 2>/dev/null
  dd if=/data/c.pattern of=/dev/mapper/vc bs=1M oflag=direct conv=fsync 2>/dev/null
  want=$(sha256sum < /data/c.pattern)
  [ "$(first8m /dev/mapper/vc)" = "$want" ] || fail "vc reads back other data"
  cachectl list > /data/out
  grep -q "+ volume vc .*/dev/mapper/vc" /data/out || fail "list: $(cat /data/out)"
  if cachectl add ssd --origin /dev/mapper/vc --volume loop 2> /data/err; then fail "added the cache's own device"; fi
  grep -q "is served by cache 'ssd'" /data/err || fail "own device: $(cat /data/err)"
  if cachectl add ssd --origin /dev/mapper/va --volume again 2> /data/err; then fail "added va twice"; fi
  grep -q "cached already" /data/err || fail "va twice: $(cat /data/err)"
  exec 3< /dev/mapper/vc
  if cachectl remove ssd --volume vc 2> /data/err; then fail "removed an open volume"; fi
  grep -q "/dev/mapper/vc is in use" /data/err || fail "open vc: $(cat /data/err)"
  exec 3<&-
  cachectl remove ssd --volume vc > /data/out || fail "remove vc: $(cat /data/out)"
  dmsetup info vc > /dev/null 2>&1 && fail "/dev/mapper/vc is still there"
  [ "$(first8m /dev/loop3)" = "$want" ] || fail "vc's data is not on its origin"

  echo "-- kill -9 and start"
  sleep 2
  kernel_b=$(cachectl stats ssd --volume b --json | sed -n 's/.*"kernel_device": "\([^"]*\)".*/\1/p')
  [ -n "$kernel_b" ] || fail "b has no kernel device"
  kill -9 "$(cat /run/cachectl/ssd/pid)"
  sleep 2
  timeout 120 cachectl start ssd > /data/out 2>&1 || fail "start: $(cat /data/out)"
  sleep 2
  echo 3 > /proc/sys/vm/drop_caches
  (cd /mnt/vb && cat w* > /dev/null)
  cachectl stats ssd --volume b --json > /data/stats
  grep -q '"dm_device": "/dev/mapper/vb"' /data/stats || fail "stats of b: $(cat /data/stats)"
  grep -q "\"kernel_device\": \"$kernel_b\"" /data/stats || fail "b's $kernel_b was not taken back: $(cat /data/stats)"
  grep -q "took back $kernel_b" /data/state/ssd/daemon.log || fail "no take-back of $kernel_b in the log"
  grep -q '"read_hits": 0,' /data/stats && fail "no read hits on b: $(cat /data/stats)"

  echo "-- remove b while both writers run"
  cachectl remove ssd --volume b > /data/out || fail "remove b: $(cat /data/out)"
  [ "$(dmsetup table vb)" = "$table_b" ] || fail "vb's table is not back: $(dmsetup table vb)"
  dmsetup info "cachectl-origin-ssd+b" > /dev/null 2>&1 && fail "vb's hidden origin device is still there"
  sleep 2
  cachectl detach ssd > /dev/null
  sleep 1
  touch /data/stop
  wait $pa $pb
  for v in va vb; do
    [ -e /data/$v.err ] && fail "the writer on $v saw errors: $(cat /data/$v.err)"
    umount /mnt/$v
    e2fsck -fn /dev/mapper/$v > /dev/null || fail "e2fsck $v"
    mount -o ro /dev/mapper/$v /mnt/$v
    (cd /mnt/$v && sha256sum -c /data/$v.sums > /dev/null) || fail "checksums differ on $v"
    echo "the writer on $v wrote $(wc -l < /data/$v.sums) files, all intact"
    umount /mnt/$v
    dmsetup remove $v
  done
  for l in 0 1 2 3; do losetup -d /dev/loop$l; done
  rm -f /data/*.img
done
echo "volumes_guest_test: all passed"
