#!/usr/bin/env bash
# A full metadata filesystem under a running daemon: the state directory
# (with the metadata store) on a small tmpfs that fills up while clients
# write. The daemon must not die: clients get I/O errors, reads go on,
# `cachectl stats` and `cachectl list` say metadata_failed; after space is
# freed, `cachectl stop` then `start` reopens the store and every byte that
# was flushed before reads back.
# Usage: metadata_full_test.sh PATH/TO/cachectl   (as root: it mounts a tmpfs)
set -u
C=$1
command -v qemu-io >/dev/null && command -v qemu-img >/dev/null || { echo "FAIL: qemu-io or qemu-img is not installed (run scripts/setup.sh)"; exit 1; }
if [ "$(id -u)" -ne 0 ]; then echo "FAIL: needs root to mount a small tmpfs"; exit 1; fi
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
mkdir -p "$W/state"
cleanup() {
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  # The daemon's files are on the tmpfs: wait until it is gone to unmount.
  for _ in $(seq 1 50); do umount "$W/state" 2>/dev/null && break; sleep 0.1; done
  rm -rf "$W"
}
trap cleanup EXIT
mount -t tmpfs -o size=24m tmpfs "$W/state" || { echo "FAIL: cannot mount a tmpfs"; exit 1; }
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
  [ -f "$W/state/vol/daemon.log" ] && sed 's/^/  daemon.log: /' "$W/state/vol/daemon.log" | tail -5
}
nbd="nbd:unix:$W/run/vol/nbd"
io() { qemu-io -f raw "$nbd" "$@" >"$W/io" 2>&1 && ! grep -q "verification failed\|error" "$W/io"; }

truncate -s 256M "$W/origin.img"
truncate -s 128M "$W/ssd.img"
"$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --mode writeback \
  --line-size 4K --frontend socket >"$W/out" 2>&1 || { fail "attach: $(cat "$W/out")"; exit 1; }
"$C" set vol --seq-cutoff 0 >/dev/null 2>&1
# What must survive: 8 MiB written and flushed.
io -c 'write -P 0x5a 0 8M' -c 'flush' || fail "the first writes: $(tail -3 "$W/io")"

# The filesystem fills up; clients go on writing 4 KiB blocks in an 8 MiB
# region away from that data (a record each) until the store cannot take
# more. RocksDB preallocates its log in steps of about a memtable, and a
# write into that space succeeds on a full filesystem: the rounds go on
# until the log (or the memtable's flush) needs space that is not there,
# whatever the memtable's size.
dd if=/dev/zero of="$W/state/filler" bs=1M 2>/dev/null
region="driver=raw,offset=$((16 << 20)),size=$((8 << 20)),file.driver=nbd"
region+=",file.server.type=unix,file.server.path=$W/run/vol/nbd"
failed_io=0
for round in $(seq 1 40); do
  if ! qemu-img bench --image-opts "$region" -w -c 50000 -d 4 -s 4k --flush-interval=64 \
      --pattern=119 >"$W/io" 2>&1 || grep -q "Failed request" "$W/io"; then
    failed_io=1
    break
  fi
done
[ "$failed_io" -eq 1 ] || fail "writes never failed on a full metadata filesystem"
kill -0 "$(cat "$W/run/vol/pid")" 2>/dev/null || fail "the daemon died"
"$C" stats vol --json >"$W/stats" 2>&1 || fail "stats: $(cat "$W/stats")"
grep -q '"metadata_failed": true' "$W/stats" || fail "stats lacks metadata_failed: $(cat "$W/stats")"
grep -q '"state": "metadata_failed"' "$W/stats" || fail "stats state: $(cat "$W/stats")"
"$C" list >"$W/list" 2>&1
grep -q "metadata_failed" "$W/list" || fail "list does not say metadata_failed: $(cat "$W/list")"
io -c 'write -P 0x66 0 4k' && fail "a write succeeded on the failed store"
io -c 'read -P 0x5a 0 8M' || fail "reads stopped or lost flushed data: $(tail -3 "$W/io")"

# Space again, stop, start: the store recovers and the flushed data is there.
rm -f "$W/state/filler"
"$C" stop vol >"$W/out" 2>&1 || echo "note: stop said: $(cat "$W/out")"
"$C" start vol >"$W/out" 2>&1 || fail "start after freeing space: $(cat "$W/out")"
io -c 'read -P 0x5a 0 8M' || fail "flushed data lost after the restart: $(tail -3 "$W/io")"
"$C" stats vol --json >"$W/stats" 2>&1
grep -q '"metadata_failed": false' "$W/stats" || fail "still metadata_failed after the restart"
io -c 'write -P 0x33 64M 1M' -c 'flush' -c 'read -P 0x33 64M 1M' || fail "writes after the restart: $(tail -3 "$W/io")"
"$C" detach vol >"$W/out" 2>&1 || fail "detach: $(cat "$W/out")"
qemu-io -f raw "$W/origin.img" -c 'read -P 0x5a 0 8M' -c 'read -P 0x33 64M 1M' >"$W/io" 2>&1 &&
  ! grep -q "verification failed\|error" "$W/io" || fail "the origin after detach: $(tail -3 "$W/io")"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "metadata_full_test: all passed"
