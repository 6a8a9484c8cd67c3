#!/usr/bin/env bash
# A superblock that fails its checksum, on a write-back cache with dirty
# data whose metadata store is intact, after a clean stop and after kill -9:
# `cachectl check` says start repairs it, `rebuild` points to start,
# `cachectl start` rewrites it from the store and says so in one line, every
# byte written reads back (the dirty data came from the cache: the origin
# never had it), and `check` is clean afterwards. When the cache device's
# sync mark cannot vouch for the store's UUID, start refuses in one line and
# no device changes.
# Usage: superblock_repair_test.sh PATH/TO/cachectl
set -u
C=$1
for tool in qemu-io nbdcopy; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed (run scripts/setup.sh)"; exit 1; }
done
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
kill_daemons() { for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done; }
cleanup() { kill_daemons; rm -rf "$W"; }
trap cleanup EXIT
source "$(dirname "$0")/../support/cli_lib.sh"
run() { "$C" "$@" >"$W/out" 2>"$W/err"; }
uri() { echo "nbd+unix:///?socket=$W/run/vol/nbd"; }
# Whether the volume holds data.bin at 8M.
holds_data() { nbdcopy "$(uri)" "$W/volume.out" && cmp -s -i 0:$((8 << 20)) -n $((2 << 20)) "$W/data.bin" "$W/volume.out"; }
head -c 2M /dev/urandom >"$W/data.bin"

# 0x11 on the origin; 2 MiB of random data at 8M written back and flushed
# by the client, never cleaned (only on the cache); the first 4M read into
# the cache (clean lines). Then the daemon stops as $1 says.
prepare() {
  kill_daemons  # one a failed case left running
  rm -rf "$W/state" "$W/run" "$W"/*.img
  truncate -s 64M "$W/origin.img" "$W/ssd.img"
  qemu-io -f raw "$W/origin.img" -c 'write -P 0x11 0 16M' >/dev/null
  run attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --mode writeback --line-size 4K \
      --frontend socket || { fail "attach: $(cat "$W/err")"; return 1; }
  run set vol --seq-cutoff 0 --dirty-high 100 --dirty-low 99
  io vol -c 'read -P 0x11 0 4M'
  io vol -c "write -s $W/data.bin 8M 2M" -c flush
  if [ "$1" = crash ]; then
    kill -9 "$(cat "$W/run/vol/pid")"; sleep 0.2
  else
    run stop vol || fail "stop: $(cat "$W/err")"
  fi
  run check vol
  uuid=$(sed -n 's/^cache vol (\(.*\))$/\1/p' "$W/out")
  [ -n "$uuid" ] || fail "check before the damage: $(cat "$W/out" "$W/err")"
}

# Bits flipped inside the checksummed area: the line count's top byte, the
# origin path, the reserved tail. The magic and format version stay whole.
flip() {
  local at
  for at in 60 66 2000; do
    local byte
    byte=$(od -An -tu1 -j $at -N1 "$W/ssd.img" | tr -d ' ')
    printf "\\$(printf %03o $(( byte ^ 0x5a )))" | dd of="$W/ssd.img" bs=1 seek=$at conv=notrunc 2>/dev/null
  done
}

for how in stop crash; do
  echo "== after $how: the superblock fails its checksum"
  prepare $how || continue
  flip
  run check vol; rc=$?
  [ $rc -eq 1 ] && grep -q "'cachectl start vol' rewrites the superblock from the metadata store" "$W/out" ||
    fail "check before start: exit $rc: $(cat "$W/out" "$W/err")"
  grep -q "rebuild" "$W/out" && fail "check suggests a rebuild: $(cat "$W/out")"
  expect 4 "'cachectl start vol' rewrites the superblock from the metadata store and keeps it" -- rebuild vol
  run start vol || { fail "start: $(cat "$W/err")"; continue; }
  [ "$(wc -l <"$W/err")" -eq 1 ] || fail "start said more than one line: $(cat "$W/err")"
  grep -q "^cachectl: the superblock on file:$(realpath "$W/ssd.img") failed its checksum; rewritten from the metadata store (cache UUID $uuid)" "$W/err" ||
    fail "start: $(cat "$W/err")"
  grep -q "^started vol" "$W/out" || fail "start: $(cat "$W/out")"
  grep -q "failed its checksum; rewritten" "$W/state/vol/daemon.log" || fail "no repair in the daemon log"
  run stats vol --json && ! grep -q '"dirty_lines": 0,' "$W/out" || fail "no dirty lines after start: $(cat "$W/out")"
  qemu-io -f raw -r "$W/origin.img" -c 'read -P 0x11 8M 2M' >"$W/io" 2>&1 && ! grep -q "verification failed" "$W/io" ||
    fail "the origin already had the data: the test proves nothing: $(cat "$W/io")"
  # Last: reading all 64M fills the cache, and evicting a dirty line cleans it.
  io vol -c 'read -P 0x11 0 8M' -c 'read -P 0x11 10M 6M'
  holds_data || fail "the dirty data does not read back"
  run stop vol || fail "stop: $(cat "$W/err")"
  run check vol || fail "check after the repair: $(cat "$W/out" "$W/err")"
  grep -q "^ok$" "$W/out" || fail "check after the repair: $(cat "$W/out")"
  run start vol && [ ! -s "$W/err" ] || fail "second start: $(cat "$W/err")"
  run detach vol || fail "detach: $(cat "$W/err")"
  cmp -s -i 0:$((8 << 20)) -n $((2 << 20)) "$W/data.bin" "$W/origin.img" || fail "the origin lacks the data after detach"
done

echo "== the sync mark is blank: nothing vouches for the store's UUID"
if prepare stop; then
  flip
  dd if=/dev/zero of="$W/ssd.img" bs=4096 seek=15 count=1 conv=notrunc 2>/dev/null  # the mark, at 60 KiB
  expect 4 "is blank, so nothing on the device confirms it holds cache $uuid" -- start vol
  grep -q "the cache is damaged" "$W/err" || fail "start: $(cat "$W/err")"
fi

finish "superblock repair"
