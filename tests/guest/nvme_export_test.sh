#!/bin/sh
# Runs inside the guest: a cached device-mapper volume exported over
# NVMe/TCP by the kernel's own target (cachectl export), connected to with
# nvme-cli on the guest's loopback, written and verified with fio; a host
# that is not allowed is refused; detach and stop refuse while exported;
# then disconnect, flush, detach: the origin holds exactly what was written.
set -eu
fail() { echo "FAIL: $*"; exit 1; }
modprobe loop
modprobe dm-mod
modprobe configfs
modprobe nvmet-tcp
modprobe nvme-tcp
mount -t configfs none /sys/kernel/config
ip link set lo up
mkdir -p /data
mount -t tmpfs -o size=700M tmpfs /data
export CACHECTL_RUN_DIR=/run/cachectl CACHECTL_STATE_DIR=/data/state
nvmet=/sys/kernel/config/nvmet
hostid=11111111-2222-3333-4444-555555555555 otherid=99999999-8888-7777-6666-555555555555
host=nqn.2014-08.org.nvmexpress:uuid:$hostid other=nqn.2014-08.org.nvmexpress:uuid:$otherid
nqn=nqn.2026-11.org.cachectl:vol

truncate -s 256M /data/vol.img
truncate -s 64M /data/ssd.img
losetup /dev/loop0 /data/vol.img
losetup /dev/loop1 /data/ssd.img
dmsetup create vol --table "0 524288 linear /dev/loop0 0"
cachectl attach --origin /dev/mapper/vol --cache /dev/loop1 --mode writeback --frontend ublk

echo "== bad input changes nothing"
expect_usage() {  # the command exits 2 and the target is untouched
  set +e
  "$@" 2>/data/err
  rc=$?
  set -e
  [ $rc -eq 2 ] || fail "exit $rc, not 2, for: $* ($(cat /data/err))"
  [ -z "$(ls $nvmet/subsystems)$(ls $nvmet/ports)" ] || fail "the target changed after: $*"
}
expect_usage cachectl export vol --nvme-tcp 127.0.0.1:4420
expect_usage cachectl export vol --nvme-tcp localhost:4420 --allow-any-host
expect_usage cachectl export vol --nvme-tcp 127.0.0.1:0 --allow-any-host
expect_usage cachectl export vol --nvme-tcp 127.0.0.1:4420 --nqn not-an-nqn --allow-any-host
expect_usage cachectl export vol --nvme-tcp 127.0.0.1:4420 --allow-host $host --allow-any-host
expect_usage cachectl export ../vol --nvme-tcp 127.0.0.1:4420 --allow-any-host

echo "== export"
cachectl export vol --nvme-tcp 127.0.0.1:4420 --allow-host $host
[ "$(cat $nvmet/subsystems/$nqn/namespaces/1/device_path)" = /dev/mapper/vol ] || fail "namespace device"
[ "$(cat $nvmet/subsystems/$nqn/attr_allow_any_host)" = 0 ] || fail "any host allowed"
if cachectl export vol --nvme-tcp 127.0.0.1:4421 --allow-host $host 2>/data/err; then fail "exported twice"; fi
grep -q "exported already" /data/err || fail "twice: $(cat /data/err)"
cachectl stats vol --json > /data/stats
grep -q '"nvme_export": {"address": "127.0.0.1:4420", "nqn": "'$nqn'"' /data/stats || fail "stats: $(cat /data/stats)"
grep -q '"live": true' /data/stats || fail "stats live: $(cat /data/stats)"
cachectl stats vol | grep -q "exported .*nvme-tcp 127.0.0.1:4420 as $nqn" || fail "human stats: $(cachectl stats vol)"
cachectl list | grep -q "+nvme-tcp 127.0.0.1:4420" || fail "list: $(cachectl list)"

echo "== a host that is not allowed is refused"
if nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $nqn --hostnqn=$other --hostid=$otherid 2>/data/err; then
  fail "a host that is not allowed connected"
fi
dmesg | grep -q "nvmet: .*not allowed" || fail "the target did not say it refused the host: $(cat /data/err; dmesg | tail -5)"
ls /sys/class/nvme 2>/dev/null | grep -q nvme && fail "a controller appeared for the refused host"

echo "== the allowed host reads and writes"
nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $nqn --hostnqn=$host --hostid=$hostid || fail "connect"
dev=
for i in $(seq 1 50); do
  # With multipath the disk is named after the subsystem, else after the controller.
  for c in /sys/class/nvme-subsystem/nvme-subsys* /sys/class/nvme/nvme*; do
    [ "$(cat $c/subsysnqn 2>/dev/null)" = $nqn ] || continue
    for n in $c/nvme*n1; do [ -b "/dev/$(basename $n)" ] && dev=/dev/$(basename $n); done
  done
  [ -n "$dev" ] && break
  sleep 0.2
done
[ -n "$dev" ] || fail "no namespace device for $nqn: $(ls /dev | grep nvme)"
echo "namespace: $dev"
job="--name=v --filename=$dev --ioengine=libaio --direct=1 --bs=4k --iodepth=16 --rw=randwrite --size=48M \
  --verify=crc32c --randrepeat=1 --randseed=7"
fio $job --do_verify=1 --output=/data/fio.out || fail "fio: $(cat /data/fio.out)"
dd if=/dev/urandom of=/data/pattern bs=1M count=16 2>/dev/null
dd if=/data/pattern of=$dev bs=1M seek=64 oflag=direct conv=fsync 2>/dev/null || fail "dd to $dev"

echo "== detach and stop refuse while exported"
if cachectl detach vol 2>/data/err; then fail "detached while exported"; fi
grep -q "is exported over NVMe/TCP" /data/err || fail "detach: $(cat /data/err)"
if cachectl stop vol 2>/data/err; then fail "stopped while exported"; fi
grep -q "unexport vol' first" /data/err || fail "stop: $(cat /data/err)"

echo "== stop --force takes the export down, start serves it again"
nvme disconnect -n $nqn || fail "disconnect"
cachectl stats vol --json | grep -q '"dirty_lines": 0,' && fail "nothing was dirty: the test did not test write-back"
cachectl stop vol --force | tee /data/out
grep -q "the next start serves it again" /data/out || fail "stop --force: $(cat /data/out)"
[ -z "$(ls $nvmet/subsystems)$(ls $nvmet/ports)" ] || fail "stop --force left: $(find $nvmet)"
cachectl start vol | tee /data/out
grep -q "exported again: nvme-tcp 127.0.0.1:4420" /data/out || fail "start did not serve the export again"
[ "$(cat $nvmet/subsystems/$nqn/namespaces/1/device_path)" = /dev/mapper/vol ] || fail "namespace after start"
nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $nqn --hostnqn=$host --hostid=$hostid || fail "connect after start"
nvme disconnect -n $nqn || fail "disconnect after start"

echo "== flush, detach --force"
cachectl flush vol
cachectl detach vol --force | tee /data/out
grep -q "unexported vol" /data/out || fail "detach --force did not say it unexported"
[ -z "$(ls $nvmet/subsystems)$(ls $nvmet/ports)$(ls $nvmet/hosts)" ] || fail "the target still has: $(find $nvmet)"

echo "== the origin holds exactly what was written"
fio $(echo $job | sed "s#$dev#/dev/mapper/vol#") --verify_only --output=/data/fio.out || fail "verify: $(cat /data/fio.out)"
dd if=/dev/mapper/vol of=/data/back bs=1M skip=64 count=16 iflag=direct 2>/dev/null
cmp /data/pattern /data/back || fail "the pattern differs on the origin"

echo "== unexport"
cachectl attach --origin /dev/mapper/vol --cache /dev/loop1 --mode writethrough --frontend ublk --force >/dev/null
cachectl export vol --nvme-tcp 127.0.0.1:4420 --allow-any-host >/dev/null
[ "$(cat $nvmet/subsystems/$nqn/attr_allow_any_host)" = 1 ] || fail "--allow-any-host"
cachectl unexport vol
[ -z "$(ls $nvmet/subsystems)$(ls $nvmet/ports)" ] || fail "unexport left: $(find $nvmet)"
# A host entry the administrator made (perhaps with keys) outlives the export.
mkdir $nvmet/hosts/$other
cachectl export vol --nvme-tcp 127.0.0.1:4420 --allow-host $other >/dev/null
cachectl unexport vol >/dev/null
[ -d $nvmet/hosts/$other ] || fail "unexport removed a host entry it did not make"
rmdir $nvmet/hosts/$other
if cachectl unexport vol 2>/data/err; then fail "unexported twice"; fi
grep -q "is not exported" /data/err || fail "unexport twice: $(cat /data/err)"
cachectl detach vol >/dev/null
echo "nvme_export_test: all passed"
