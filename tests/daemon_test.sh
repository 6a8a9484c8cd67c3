#!/usr/bin/env bash
# cachectl end to end: the daemon and every command, on sparse files, with
# the cached volume used through its NBD socket by qemu-io and nbdinfo.
# Bad input: the exit code and the one-line message are asserted, and
# neither device changes. A kill -9 of the daemon loses no flushed write.
# Usage: daemon_test.sh PATH/TO/cachectl
set -u
C=$1
for tool in qemu-io nbdinfo setpriv losetup mkfs.ext4; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed (run scripts/setup.sh)"; exit 1; }
done
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
busy_loop=
cleanup() {
  mountpoint -q "$W/busy" 2>/dev/null && umount "$W/busy"
  [ -n "$busy_loop" ] && losetup -d "$busy_loop" 2>/dev/null
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
source "$(dirname "$0")/support/cli_lib.sh"

truncate -s 256M "$W/origin.img" "$W/origin2.img" "$W/origin3.img"
truncate -s 64M "$W/ssd.img" "$W/ssd2.img"
truncate -s 1M "$W/tiny.img"
# Known data on the origin before the cache comes.
qemu-io -f raw "$W/origin.img" -c 'write -P 0x42 0 4M' >/dev/null

echo "== bad input before any cache exists"
expect 3 "origin $W/none.img does not exist" -- attach --origin "$W/none.img" --cache "$W/ssd.img"
expect 2 "same device" -- attach --origin "$W/origin.img" --cache "$W/origin.img"
expect 2 "too small" -- attach --origin "$W/origin.img" --cache "$W/tiny.img"
expect 2 "unknown cache mode 'fast'" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --mode fast
expect 2 "unknown size suffix" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --line-size 64Q
expect 2 "not a power of two" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --line-size 3K
expect 2 "not a valid cache name" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --name ../x
expect 2 "unknown front end 'fuse'" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --frontend fuse
expect 2 "the option '--origin' is required" -- attach --cache "$W/ssd.img"
expect 2 "cleaner settings need target <= low < high" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --dirty-target 50
expect 2 "cleaner settings need target <= low < high" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --dirty-low 70 --dirty-high 70
expect 3 "no cache named 'nope'" -- stats nope
expect 3 "no cache named 'nope'" -- flush nope
expect 3 "no cache named 'nope'" -- detach nope
expect 3 "no cache named 'nope'" -- start nope
# A block device that is mounted is in use.
truncate -s 64M "$W/busy.img"
busy_loop=$(losetup --find --show "$W/busy.img")
mkfs.ext4 -q "$busy_loop" && mkdir -p "$W/busy" && mount "$busy_loop" "$W/busy"
expect 4 "$busy_loop is in use" -- attach --origin "$W/origin.img" --cache "$busy_loop"
umount "$W/busy"; losetup -d "$busy_loop"; busy_loop=
[ -z "$(ls "$W/state" 2>/dev/null)" ] || fail "a refused attach left state behind: $(ls "$W/state")"
# Not root, default directories: refused.
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups env -u CACHECTL_RUN_DIR -u CACHECTL_STATE_DIR \
      "$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" 2>&1)
rc=$?
[ $rc -eq 4 ] && echo "$out" | grep -q "permission denied" || fail "non-root attach: exit $rc: $out"

echo "== attach, use, stats"
expect 0 "" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --mode writeback --dirty-target 5 \
  --dirty-low 35 --dirty-high 65 --cleaner-batch 48
grep -q "write-back: written data lives only on the cache" "$W/out" || fail "attach did not warn about write-back"
[ "$(stat -c %a "$W/run/vol/control")" = 600 ] || fail "control socket is not 0600"
nbdinfo "nbd+unix:///vol?socket=$W/run/vol/nbd" | grep -q "export-size: 268435456" || fail "nbdinfo: wrong size"
io vol -c 'read -P 0x42 0 4M'                      # the origin's data, through the cache
io vol -c 'read -P 0x42 0 1M' -c 'read -P 0x42 0 1M'
io vol -c 'write -P 0x17 8M 2M' -c 'flush' -c 'read -P 0x17 8M 2M'
io vol -c 'write -f -P 0x18 12M 64k'                # FUA
expect 0 "" -- stats vol --json
for key in '"name": "vol"' '"state": "running"' '"mode": "writeback"' '"line_size": 65536' \
           '"capacity_lines"' '"occupancy_lines"' '"dirty_lines"' '"read_hits"' '"read_misses"' \
           '"write_hits"' '"write_misses"' '"read_hit_ratio"' '"hit_ratio"' '"bypassed"' '"bypassed_no_space"' \
           '"evictions"' '"cleaner_writes"' '"cleaner_state"' '"policy": "adaptive: small ' '"writeback_rate"' '"throttled_writes"' '"peak_in_flight"' '"errors": {"cache": {"read": 0, "write": 0' \
           '"origin": {"read": 0'; do
  grep -q "$key" "$W/out" || fail "stats --json lacks $key: $(cat "$W/out")"
done
grep -q '"dirty_target_pct": 5, "dirty_high_pct": 65, "dirty_low_pct": 35, "cleaner_batch_lines": 48' "$W/out" ||
  fail "attach's cleaner settings: $(cat "$W/out")"
grep -q '"read_hits": 0,' "$W/out" && fail "no read hits after reading the same data twice"
grep -q '"requests": {"fua_writes": [1-9][0-9]*, "flushes": [1-9]' "$W/out" ||
  fail "the FUA write or the flush was not counted: $(cat "$W/out")"
expect 0 "" -- stats vol --csv
[ "$(head -1 "$W/out" | cut -d, -f1-4)" = "schema_version,name,state,mode" ] || fail "stats --csv header: $(head -1 "$W/out")"
timeout 5 "$C" stats vol --csv --watch 1 >"$W/watch" 2>&1
[ "$(grep -c '^2,vol,running' "$W/watch")" -ge 2 ] || fail "stats --watch: $(cat "$W/watch")"
[ "$(grep -c '^schema_version,' "$W/watch")" -eq 1 ] || fail "stats --watch repeated its header"
expect 2 "positive number of seconds" -- stats vol --watch 0
expect 0 "" -- list --json
grep -q '"name": "vol", "state": "running", "mode": "writeback"' "$W/out" || fail "list --json: $(cat "$W/out")"
expect 0 "" -- list --csv
[ "$(head -1 "$W/out")" = "name,state,mode,origin,cache,dirty_lines,hit_ratio,kernel_device,dm_device,capacity_bytes,occupied_bytes,nvme_export,volumes" ] ||
  fail "list --csv header"

echo "== bad input while a cache runs"
expect 4 "a cache named 'vol' exists already" -- attach --origin "$W/origin2.img" --cache "$W/ssd2.img" --name vol
expect 4 "is in use by cache 'vol'" -- attach --origin "$W/origin2.img" --cache "$W/ssd.img" --name other
expect 4 "is in use by cache 'vol'" -- attach --origin "$W/origin.img" --cache "$W/ssd2.img" --name other
expect 2 "unknown cache mode" -- set vol --mode sideways
expect 2 "cleaner settings need target <= low < high" -- set vol --dirty-high 30 --dirty-low 50
expect 2 "cleaner settings need target <= low < high" -- set vol --dirty-target 45
expect 0 "" -- set vol --dirty-high 70 --cleaner-batch 32 --dirty-target 15
expect 0 "" -- stats vol --json
grep -q '"dirty_target_pct": 15, "dirty_high_pct": 70, "dirty_low_pct": 35, "cleaner_batch_lines": 32' "$W/out" ||
  fail "set cleaner: $(cat "$W/out")"

echo "== flush, mode switch, stop and start warm"
expect 0 "" -- flush vol
grep -q "flush: 100%, 0 dirty lines left" "$W/out" || fail "flush progress: $(cat "$W/out")"
expect 0 "" -- set vol --mode wt --seq-cutoff 4M
expect 0 "" -- stats vol --json
grep -q '"mode": "writethrough"' "$W/out" || fail "set --mode did not take"
expect 0 "" -- set vol --mode writeback
io vol -c 'write -P 0x23 16M 1M'                   # dirty, not flushed by the client
expect 0 "" -- stop vol
expect 0 "" -- list --csv
grep -q "^vol,stopped" "$W/out" || fail "list after stop: $(cat "$W/out")"
expect 0 "" -- start --all
grep -q "started vol (writeback, warm from its snapshot)" "$W/out" || fail "start --all after a stop: $(cat "$W/out")"
expect 0 "" -- start --all                          # nothing left to start: fine
expect 0 "" -- stats vol --json
grep -q '"dirty_lines": 0,' "$W/out" && fail "dirty lines did not survive stop/start"
expect 0 "" -- stats vol --reset
expect 0 "" -- stats vol --json
grep -q '"read_hits": 0, "read_misses": 0' "$W/out" || fail "stats --reset did not zero: $(cat "$W/out")"
io vol -c 'read -P 0x23 16M 1M' -c 'read -P 0x17 8M 2M' -c 'read -P 0x42 0 4M'

echo "== kill -9 loses no flushed write"
io vol -c 'write -P 0x61 32M 4M' -c 'flush'
(qemu-io -f raw "$(nbd vol)" -c 'write -P 0x62 40M 16M' >/dev/null 2>&1 &)
sleep 0.3
pid=$(cat "$W/run/vol/pid"); kill -9 "$pid"
# Gone, sockets closed (a dying process may still accept for a moment).
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
expect 3 "is not running" -- flush vol
expect 0 "" -- stats vol
grep -q "^vol: stopped" "$W/out" || fail "stats of a dead daemon: $(cat "$W/out")"
expect 0 "" -- start vol                           # clears the stale sockets
grep -q "started vol (writeback, warm from saved metadata)" "$W/out" || fail "start after kill -9: $(cat "$W/out")"
expect 0 "" -- stats vol --json
grep -q '"started_from": "records"' "$W/out" || fail "stats after a start from the records: $(cat "$W/out")"
io vol -c 'read -P 0x61 32M 4M' -c 'read -P 0x23 16M 1M' -c 'read -P 0x42 0 4M'

echo "== SIGTERM stops cleanly"
pid=$(cat "$W/run/vol/pid")
kill -TERM "$pid"
for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "the daemon ignored SIGTERM (still running 20 s later)"
expect 0 "" -- check vol
grep -q "last shutdown *clean" "$W/out" || fail "SIGTERM did not shut down cleanly: $(cat "$W/out")"
expect 0 "" -- start vol
io vol -c 'read -P 0x61 32M 4M'

echo "== a cache device with another cache's dirty data"
# A port nobody listens on now (the kernel's pick; a fixed one may be taken).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
expect 0 "" -- attach --origin "$W/origin2.img" --cache "$W/ssd2.img" --name two --mode wb --nbd-tcp 127.0.0.1:$port
nbdinfo "nbd://127.0.0.1:$port/two" | grep -q "export-size: 268435456" || fail "NBD over TCP on an explicit address"
grep -q "nbd_tcp=127.0.0.1:$port" "$W/state/two/cache.conf" || fail "the TCP address was not saved"
io two -c 'write -P 0x77 0 256k'                  # under the sequential cutoff: cached, dirty
expect 0 "" -- stop two
rm -rf "$W/state/two"                               # its metadata is gone; its SSD is not
expect 4 "already holds cachectl cache" -- attach --origin "$W/origin3.img" --cache "$W/ssd2.img" --name three
expect 4 "has dirty data" -- attach --origin "$W/origin3.img" --cache "$W/ssd2.img" --name three --force

echo "== check, offline"
expect 4 "is running; stop it first" -- check vol
expect 0 "" -- flush vol                           # every line clean: the damage below heals
expect 0 "" -- stop vol
expect 0 "" -- check vol
grep -q "^ok" "$W/out" || fail "check of a healthy cache: $(cat "$W/out")"
# Damage the first cached block on the SSD (slot data starts at 1 MiB): clean,
# so the origin has its data and reads repair it. (A dirty block damaged so
# is lost: detach refuses, tests/crash/damage_test.sh.)
printf 'garbage%.0s' {1..600} | dd of="$W/ssd.img" bs=4096 seek=256 conv=notrunc status=none
expect 1 "problem(s), listed above" -- check vol
grep -q "PROBLEM: [0-9]* clean block(s) fail their checksum" "$W/out" || fail "check did not see the damage: $(cat "$W/out")"
expect 0 "" -- start vol

echo "== detach: the origin alone holds the data"
expect 0 "" -- detach vol
grep -q "detached" "$W/out" || fail "detach output: $(cat "$W/out")"
[ -e "$W/state/vol" ] && fail "detach left state behind"
qemu-io -f raw "$W/origin.img" -c 'read -P 0x42 0 4M' -c 'read -P 0x17 8M 2M' -c 'read -P 0x23 16M 1M' \
  -c 'read -P 0x61 32M 4M' 2>&1 | grep -q "verification failed" && fail "the origin lacks flushed data after detach"
expect 0 "" -- attach --origin "$W/origin.img" --cache "$W/ssd.img" --name again   # the SSD was released
expect 0 "" -- detach again

finish daemon_test
