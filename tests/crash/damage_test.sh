#!/usr/bin/env bash
# Damaged metadata: the metadata store's files corrupted or truncated, its
# directory gone, the superblock overwritten; each with and without dirty
# data. `cachectl start` refuses in one line that says what is wrong;
# `cachectl check` reports it; where the origin is complete, `cachectl
# rebuild` makes a new cold cache and every byte reads as before; where
# dirty data existed, check and rebuild name the origin ranges that may be
# stale, and rebuild needs --force.
# Usage: damage_test.sh PATH/TO/cachectl
set -u
C=$1
command -v qemu-io >/dev/null || { echo "FAIL: qemu-io is not installed (run scripts/setup.sh)"; exit 1; }
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
cleanup() {
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
failures=0 cases=0
fail() { echo "FAIL [$case]: $*"; failures=$((failures + 1)); }
run() { "$C" "$@" >"$W/out" 2>"$W/err"; }
nbd() { echo "nbd:unix:$W/run/vol/nbd"; }
check_io() {
  local target=$1; shift
  qemu-io -f raw "$target" "$@" >"$W/io" 2>&1 && ! grep -q "verification failed\|error" "$W/io" ||
    fail "qemu-io $*: $(tail -3 "$W/io")"
}
meta=$W/state/vol/metadata

# A cache with 0x11 on the origin; in "dirty" cases 0x22 at 8M..9M is only on
# the cache (write-back, flushed by the client, never cleaned); in "clean"
# cases the same write went through (write-through).
prepare() {
  rm -rf "$W/state" "$W/run" "$W"/*.img
  truncate -s 64M "$W/origin.img" "$W/ssd.img"
  qemu-io -f raw "$W/origin.img" -c 'write -P 0x11 0 16M' >/dev/null
  local mode=writethrough; [ "$1" = dirty ] && mode=writeback
  run attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --mode $mode --line-size 4K \
      --frontend socket || { fail "attach: $(cat "$W/err")"; return 1; }
  run set vol --seq-cutoff 0 --dirty-high 100 --dirty-low 99
  check_io "$(nbd)" -c 'read -P 0x11 0 4M' -c 'write -P 0x22 8M 1M' -c 'flush'
  # The daemon dies (the damage comes while it is down, as after a crash).
  kill -9 "$(cat "$W/run/vol/pid")"; sleep 0.2
}

damage() {
  case $1 in
    store-corrupt)
      # Overwrite the middle of every file of the store (log and tables).
      for f in "$meta"/*.log "$meta"/*.sst; do
        [ -f "$f" ] || continue
        dd if=/dev/urandom of="$f" bs=1 count=64 seek=$(( $(stat -c %s "$f") / 3 )) conv=notrunc 2>/dev/null
      done ;;
    store-truncated) for f in "$meta"/MANIFEST-*; do truncate -s 20 "$f"; done ;;
    log-truncated)  # cut at a record boundary or not, RocksDB alone may take it for a torn tail
      for f in "$meta"/*.log; do truncate -s $(( $(stat -c %s "$f") / 2 )) "$f"; done ;;
    store-missing) rm -rf "$meta" ;;
    superblock-zeroed) dd if=/dev/zero of="$W/ssd.img" bs=4096 count=1 conv=notrunc 2>/dev/null ;;
    superblock-garbage) dd if=/dev/urandom of="$W/ssd.img" bs=4096 count=1 conv=notrunc 2>/dev/null
                        printf 'CACHECTL' | dd of="$W/ssd.img" conv=notrunc 2>/dev/null ;;
  esac
}

for what in store-corrupt store-truncated log-truncated store-missing superblock-zeroed superblock-garbage; do
  for data in clean dirty; do
    case="$what/$data"; cases=$((cases + 1))
    prepare $data || continue
    damage $what
    run start vol && { fail "start succeeded on a damaged cache"; run stop vol; continue; }
    [ "$(wc -l <"$W/err")" -eq 1 ] || fail "start said more than one line: $(cat "$W/err")"
    cp "$W/err" "$W/start.err"
    run check vol; rc=$?
    if [ $what = superblock-zeroed ] && [ $data = clean ]; then
      # Indistinguishable from a detach that stopped after releasing the
      # device: start says so, and nothing is stale.
      grep -q "run 'cachectl detach vol' to finish it" "$W/start.err" || fail "start: $(cat "$W/start.err")"
    else
      grep -q "the cache is damaged" "$W/start.err" || fail "start does not say the cache is damaged: $(cat "$W/start.err")"
    fi
    [ $rc -eq 1 ] || fail "check: exit $rc: $(cat "$W/out" "$W/err")"
    grep -q "damaged" "$W/out" || fail "check does not report the damage: $(cat "$W/out")"
    if [ $data = clean ]; then
      grep -q "the origin holds all the data" "$W/out" || fail "check: $(cat "$W/out")"
      run rebuild vol || { fail "rebuild: $(cat "$W/err")"; continue; }
      check_io "$(nbd)" -c 'read -P 0x11 0 8M' -c 'read -P 0x22 8M 1M' -c 'read -P 0x11 9M 7M'
      run stats vol --json && grep -q '"dirty_lines": 0' "$W/out" || fail "stats after rebuild: $(cat "$W/out")"
    else
      # The stale range 8M..9M (bytes 8388608..9437184) must be named.
      if grep -q "cannot be told" "$W/out"; then
        fail "check cannot tell what is stale: $(cat "$W/out")"
      fi
      awk '/may be stale on the origin: bytes/ { split($NF, r, "\\.\\."); if (r[1] <= 8388608 && r[2] >= 9437184) ok = 1 }
           END { exit !ok }' "$W/out" || fail "check does not name 8M..9M as stale: $(cat "$W/out")"
      run rebuild vol; rc=$?
      [ $rc -eq 4 ] && grep -q "may be stale" "$W/err" || fail "rebuild without --force: exit $rc: $(cat "$W/err")"
      run rebuild vol --force || { fail "rebuild --force: $(cat "$W/err")"; continue; }
      grep -q "keeps the origin's older data: bytes" "$W/out" || fail "rebuild --force: $(cat "$W/out")"
      check_io "$(nbd)" -c 'read -P 0x11 0 8M' -c 'read -P 0x11 9M 7M'
    fi
    run detach vol || fail "detach after rebuild: $(cat "$W/err")"
  done
done

[ -n "${CACHECTL_FIGURES:-}" ] && echo "damage_cases $cases" >>"$CACHECTL_FIGURES"
[ $failures -eq 0 ] && echo "PASS: $cases kinds of damage" || { echo "$failures failures"; exit 1; }
