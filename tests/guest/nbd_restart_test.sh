#!/bin/sh
# Runs inside the guest: kill -9 of the daemon while a mounted volume is
# cached online over kernel NBD in write-back and a writer is running.
#  - netlink: `cachectl start` hands the same /dev/nbdN to the new daemon
#    (NBD_CMD_RECONFIGURE); the writer goes on without an error, every file
#    it had synced is intact, e2fsck is clean.
#  - ioctls (CACHECTL_NBD_IOCTL=1): the device cannot be handed over;
#    `start` says so in one line, in bounded time, and leaves the volume as
#    it is; once unmounted, `start` brings the cache back and every file
#    synced before the kill is intact.
# A `start` that hangs fails the test (timeout), not the guest's timer.
set -eu
fail() { echo "FAIL: $*"; dmesg | tail -30; exit 1; }
modprobe loop
modprobe ext4
modprobe dm-mod
mkdir -p /data /mnt
mount -t tmpfs -o size=600M tmpfs /data
export CACHECTL_RUN_DIR=/run/cachectl CACHECTL_STATE_DIR=/data/state
start_limit=90  # seconds; start takes a few on this emulated machine

writer() {  # a file, sync, then it counts as written; until /data/stop
  n=0
  while [ ! -e /data/stop ]; do
    n=$((n + 1))
    dd if=/dev/urandom of=/mnt/w$n bs=16k count=4 2>/dev/null || echo "write $n" >> /data/writer.err
    sync || echo "sync $n" >> /data/writer.err
    (cd /mnt && sha256sum w$n >> /data/synced) 2>/dev/null || echo "sum $n" >> /data/writer.err
  done
}

synced() { wc -l < /data/synced; }
kernel_device() { cachectl stats vol --json | sed -n 's/.*"kernel_device": "\([^"]*\)".*/\1/p'; }

# An online dm volume with ext4 mounted and a writer, cached over kernel NBD.
setup() {
  rm -f /data/stop /data/writer.err /data/synced /data/*.img
  truncate -s 256M /data/vol.img
  truncate -s 64M /data/ssd.img
  losetup /dev/loop0 /data/vol.img
  losetup /dev/loop1 /data/ssd.img
  dmsetup create vol --table "0 524288 linear /dev/loop0 0"
  mkfs.ext4 -q /dev/mapper/vol
  mount /dev/mapper/vol /mnt
  touch /data/synced
  cachectl attach --origin /dev/mapper/vol --cache /dev/loop1 --mode writeback --frontend nbd
  writer &
  wpid=$!
  sleep 3
  [ "$(synced)" -gt 0 ] || fail "the writer synced nothing before the kill"
}

kill_daemon() {
  before=$(synced)
  kill -9 "$(cat /run/cachectl/vol/pid)"
  echo "daemon killed after $before synced files"
  sleep 2
}

teardown() {
  dmsetup remove vol
  losetup -d /dev/loop0
  losetup -d /dev/loop1
  rm -rf /data/state /data/*.img
}

echo "== netlink: start takes the same device back"
setup
dev=$(kernel_device)
case "$dev" in /dev/nbd*) ;; *) fail "not over kernel NBD: '$dev'" ;; esac
kill_daemon
t0=$(date +%s)
timeout $start_limit cachectl start vol || fail "start failed or did not finish within ${start_limit}s"
echo "start took $(($(date +%s) - t0))s"
tail -n 6 /data/state/vol/daemon.log
grep -q "took back $dev from a daemon that died" /data/state/vol/daemon.log || fail "the daemon does not say it took $dev back"
[ "$(kernel_device)" = "$dev" ] || fail "start did not take $dev back (now '$(kernel_device)')"
# The requests the dead daemon had taken are sent again by the kernel's
# request timer; new ones flow at once. Wait for the writer to go on.
at_start=$(synced)
waited=0
while [ "$(synced)" -lt $((at_start + 3)) ]; do
  [ $waited -lt 60 ] || fail "the writer did not go on within 60s after start ($at_start, $(synced))"
  sleep 1
  waited=$((waited + 1))
done
echo "the writer went on ${waited}s after start"
touch /data/stop
wait $wpid
[ -e /data/writer.err ] && fail "the writer saw errors: $(cat /data/writer.err)"
umount /mnt
cachectl detach vol
e2fsck -fn /dev/mapper/vol || fail "e2fsck"
mount -o ro /dev/mapper/vol /mnt
(cd /mnt && sha256sum -c /data/synced >/dev/null) || fail "a synced file differs"
echo "writer synced $(synced) files across the crash, all intact"
umount /mnt
teardown

echo "== netlink, a plain disk: /dev/mapper/vol over the device taken back stays"
truncate -s 256M /data/vol.img
truncate -s 64M /data/ssd.img
losetup /dev/loop0 /data/vol.img
losetup /dev/loop1 /data/ssd.img
cachectl attach --origin /dev/loop0 --cache /dev/loop1 --name vol --mode writeback --frontend nbd
dev=$(kernel_device)
mkfs.ext4 -q /dev/mapper/vol
mount /dev/mapper/vol /mnt
dd if=/dev/urandom of=/mnt/before bs=64k count=16 2>/dev/null
sync
sum=$(cd /mnt && sha256sum before)
kill -9 "$(cat /run/cachectl/vol/pid)"
sleep 1
timeout $start_limit cachectl start vol || fail "start (plain disk) failed or did not finish within ${start_limit}s"
[ "$(kernel_device)" = "$dev" ] || fail "start did not take $dev back (now '$(kernel_device)')"
dd if=/dev/urandom of=/mnt/after bs=64k count=16 2>/dev/null && sync || fail "no writes after start"
echo 3 > /proc/sys/vm/drop_caches
[ "$(cd /mnt && sha256sum before)" = "$sum" ] || fail "the file synced before the kill differs"
umount /mnt
cachectl detach vol
e2fsck -fn /dev/loop0 || fail "e2fsck (plain disk)"
losetup -d /dev/loop0
losetup -d /dev/loop1
rm -rf /data/state /data/*.img

echo "== ioctls: start explains, in bounded time, and leaves the volume as it is"
export CACHECTL_NBD_IOCTL=1
setup
table=$(dmsetup table vol)
kill_daemon
touch /data/stop  # its I/O fails from here on: nothing more counts
wait $wpid || true
sed -n "1,${before}p" /data/synced > /data/synced.before
rc=0
timeout $start_limit cachectl start vol 2> /data/start.err || rc=$?
cat /data/start.err
[ $rc -ne 124 ] && [ $rc -ne 143 ] || fail "start did not finish within ${start_limit}s"
[ $rc -ne 0 ] || fail "start succeeded under a mounted volume whose device cannot be handed over"
[ "$(wc -l < /data/start.err)" -eq 1 ] || fail "not one line"
grep -q "ioctl" /data/start.err || fail "the message does not say why"
grep -q "unmount" /data/start.err || fail "the message does not say what to do"
[ "$(dmsetup table vol)" = "$table" ] || fail "the volume's table changed: $(dmsetup table vol)"
umount /mnt || umount -f /mnt
timeout $start_limit cachectl start vol || fail "start after unmount failed or hung"
dmsetup table vol
[ "$(dmsetup table vol)" != "$table" ] || fail "the volume still points at the dead device"
cachectl detach vol
e2fsck -fy /dev/mapper/vol >/dev/null || [ $? -le 1 ] || fail "e2fsck could not repair the volume"
e2fsck -fn /dev/mapper/vol || fail "e2fsck after repair"
mount -o ro /dev/mapper/vol /mnt
(cd /mnt && sha256sum -c /data/synced.before >/dev/null) || fail "a file synced before the kill differs"
echo "$(wc -l < /data/synced.before) files synced before the kill, all intact"
umount /mnt
teardown
echo "nbd_restart_test: all passed"
