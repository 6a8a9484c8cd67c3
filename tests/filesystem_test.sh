#!/usr/bin/env bash
# A real filesystem on the cached volume: nbdfuse shows the NBD export as a
# file, a loop device makes it a block device, mkfs.ext4 and files with
# recorded checksums go on it in write-back mode; then detach, and the
# origin alone (on its own loop device) passes e2fsck and holds the same
# files. Needs root, FUSE and loop devices; a missing piece fails the test.
# Usage: filesystem_test.sh PATH/TO/cachectl
set -u
C=$1
for tool in nbdfuse fusermount3 losetup mkfs.ext4 e2fsck; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed (run scripts/setup.sh)"; exit 1; }
done
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
loops=()
fuse_pid=
cleanup() {
  mountpoint -q "$W/mnt" && umount "$W/mnt"
  for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null; done
  mountpoint -q "$W/fuse" && fusermount3 -u "$W/fuse"
  [ -n "$fuse_pid" ] && kill "$fuse_pid" 2>/dev/null
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
die() { echo "FAIL: $*"; exit 1; }

truncate -s 256M "$W/origin.img"
truncate -s 64M "$W/ssd.img"
mkdir -p "$W/fuse" "$W/mnt"
"$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" --name fs --mode writeback >/dev/null || die "attach"

nbdfuse -P "$W/nbdfuse.pid" "$W/fuse/disk" "nbd+unix:///fs?socket=$W/run/fs/nbd" &
for _ in $(seq 100); do [ -e "$W/fuse/disk" ] && break; sleep 0.1; done
[ -e "$W/fuse/disk" ] || die "nbdfuse did not show the export"
fuse_pid=$(cat "$W/nbdfuse.pid")
loop=$(losetup --find --show "$W/fuse/disk") || die "losetup on the nbdfuse file"
loops+=("$loop")
mkfs.ext4 -q -F "$loop" || die "mkfs.ext4"
mount "$loop" "$W/mnt" || die "mount"
for i in 1 2 3 4 5; do
  head -c $((i * 3 * 1024 * 1024 + i * 777)) /dev/urandom >"$W/mnt/file$i"
done
mkdir "$W/mnt/dir"
for i in $(seq 200); do echo "small file $i" >"$W/mnt/dir/s$i"; done
(cd "$W/mnt" && find . -type f -exec sha256sum {} + | sort -k2) >"$W/sums"
umount "$W/mnt" || die "umount"
losetup -d "$loop"
loops=()
fusermount3 -u "$W/fuse" || die "fusermount3 -u"
wait
fuse_pid=
"$C" stats fs --json | grep -q '"dirty_lines": 0,' && die "write-back left nothing dirty: was the cache used?"

"$C" detach fs >/dev/null || die "detach"

loop=$(losetup --find --show "$W/origin.img") || die "losetup on the origin"
loops+=("$loop")
e2fsck -fn "$loop" >"$W/fsck" 2>&1 || die "e2fsck on the origin alone: $(cat "$W/fsck")"
mount -o ro "$loop" "$W/mnt" || die "mount the origin"
(cd "$W/mnt" && find . -type f -exec sha256sum {} + | sort -k2) >"$W/sums.origin"
umount "$W/mnt"
cmp -s "$W/sums" "$W/sums.origin" || die "the origin's files differ: $(diff "$W/sums" "$W/sums.origin" | head)"
echo "filesystem_test: ext4 on the cached volume, e2fsck clean and every file intact on the origin alone"
