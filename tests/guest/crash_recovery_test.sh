#!/bin/sh
# Runs inside the guest: kill -9 of the daemon while a mounted volume is
# cached online over ublk in write-back and a writer is running. The
# kernel holds the I/O; `cachectl start` takes the device back; the writer
# goes on without an error, and every file it had synced is intact.
set -eu
fail() { echo "FAIL: $*"; exit 1; }
modprobe loop
modprobe ext4
modprobe dm-mod
mkdir -p /data /mnt
mount -t tmpfs -o size=600M tmpfs /data
export CACHECTL_RUN_DIR=/run/cachectl CACHECTL_STATE_DIR=/data/state

truncate -s 256M /data/vol.img
truncate -s 64M /data/ssd.img
losetup /dev/loop0 /data/vol.img
losetup /dev/loop1 /data/ssd.img
dmsetup create vol --table "0 524288 linear /dev/loop0 0"
mkfs.ext4 -q /dev/mapper/vol
mount /dev/mapper/vol /mnt

writer() {  # a file, sync, then it counts as written; until /data/stop
  n=0
  while [ ! -e /data/stop ]; do
    n=$((n + 1))
    dd if=/dev/urandom of=/mnt/w$n bs=16k count=4 2>/dev/null || echo "write $n" >> /data/writer.err
    sync || echo "sync $n" >> /data/writer.err
    (cd /mnt && sha256sum w$n >> /data/synced) || echo "sum $n" >> /data/writer.err
  done
}

cachectl attach --origin /dev/mapper/vol --cache /dev/loop1 --mode writeback --frontend ublk
writer &
wpid=$!
sleep 2
before=$(wc -l < /data/synced)
kill -9 "$(cat /run/cachectl/vol/pid)"
echo "daemon killed after $before synced files"
sleep 2
cachectl start vol
sleep 2
touch /data/stop
wait $wpid
[ -e /data/writer.err ] && fail "the writer saw errors: $(cat /data/writer.err)"
after=$(wc -l < /data/synced)
[ "$after" -gt "$before" ] || fail "the writer did not go on after the restart ($before, $after)"
cachectl stats vol --json | grep -q '"frontend": "ublk"' || fail "not over ublk after start"
umount /mnt
cachectl detach vol
e2fsck -fn /dev/mapper/vol || fail "e2fsck"
mount -o ro /dev/mapper/vol /mnt
(cd /mnt && sha256sum -c /data/synced >/dev/null) || fail "a synced file differs"
echo "writer synced $after files across the crash, all intact"
umount /mnt
echo "crash_recovery_test: all passed"
