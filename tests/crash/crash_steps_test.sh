#!/usr/bin/env bash
# A crash at each numbered step of attach, flush, mode switch, detach, and
# adding and removing a volume
# (cachecore/steps.h; the daemon dies by SIGKILL there when
# CACHECTL_CRASH_AT names the step). After each: the cache restarts, or a
# command refuses with one clear line that says what to do, and no flushed
# write is lost: the origin ends up with all of it.
# Usage: crash_steps_test.sh PATH/TO/cachectl
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
failures=0 steps=0
fail() { echo "FAIL [$step]: $*"; failures=$((failures + 1)); }
run() { "$C" "$@" >"$W/out" 2>"$W/err"; local rc=$?; cat "$W/err" >>"$W/out"; return $rc; }
nbd() { echo "nbd:unix:$W/run/vol/nbd"; }
# check WHERE CMDS...: qemu-io commands against the volume or an image.
check() {
  local target=$1; shift
  [ "$target" = vol ] && target=$(nbd) || target=$W/$target
  qemu-io -f raw "$target" "$@" >"$W/io" 2>&1 && ! grep -q "verification failed\|error" "$W/io" ||
    fail "qemu-io $target $*: $(tail -3 "$W/io")"
}
attach() { run attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --mode writeback \
               --line-size 4K --frontend socket "$@"; }

# A fresh pair: known data on the origin, a write-back cache over it with
# flushed dirty data (0x22 over 0x11) that the cleaner leaves alone.
fresh() {
  rm -rf "$W/state" "$W/run" "$W"/*.img
  truncate -s 32M "$W/origin.img" "$W/ssd.img"
  qemu-io -f raw "$W/origin.img" -c 'write -P 0x11 0 16M' >/dev/null
  attach || { fail "attach: $(cat "$W/out")"; return 1; }
  run set vol --dirty-high 100 --dirty-low 99 --seq-cutoff 0 || fail "set: $(cat "$W/out")"
  check vol -c 'write -P 0x22 4M 4M' -c 'flush'
}
# The flushed data, through the cache, then on the origin after a detach.
expect_data() {
  check vol -c 'read -P 0x11 0 4M' -c 'read -P 0x22 4M 4M' -c 'read -P 0x11 8M 8M'
  run detach vol || fail "detach: $(cat "$W/out")"
  check origin.img -c 'read -P 0x11 0 4M' -c 'read -P 0x22 4M 4M' -c 'read -P 0x11 8M 8M'
}
# Restart the stopped cache with the crash armed at $step.
arm() {
  run stop vol || fail "stop: $(cat "$W/out")"
  CACHECTL_CRASH_AT=$step run start vol || fail "start (armed): $(cat "$W/out")"
}
crashed() {
  grep -q "killed at step $step" "$W/state/vol/daemon.log" 2>/dev/null || fail "the daemon did not reach $step"
  [ "$(wc -l <"$W/err")" -eq 1 ] || fail "the interrupted command said more than one line: $(cat "$W/err")"
  case $step in flush-* | detach-*)
    grep -q "died during the" "$W/err" || fail "the interrupted command said: $(cat "$W/err")" ;;
  esac
}
restart() { run start vol || fail "start after the crash: $(cat "$W/out")"; }

for step in attach-1-store-formatted attach-2-superblock-written; do
  steps=$((steps + 1))
  rm -rf "$W/state" "$W/run" "$W"/*.img
  truncate -s 32M "$W/origin.img" "$W/ssd.img"
  qemu-io -f raw "$W/origin.img" -c 'write -P 0x11 0 16M' >/dev/null
  CACHECTL_CRASH_AT=$step attach && fail "attach succeeded"
  [ "$(wc -l <"$W/err")" -eq 1 ] || fail "attach said more than one line: $(cat "$W/err")"
  grep -q "daemon died" "$W/out" || fail "attach: $(cat "$W/out")"
  run start vol; [ $? -eq 3 ] || fail "start after a failed attach: $(cat "$W/out")"
  check origin.img -c 'read -P 0x11 0 16M'
  attach || fail "attach again (no --force needed): $(cat "$W/out")"
  check vol -c 'read -P 0x11 0 16M'
  run detach vol || fail "detach: $(cat "$W/out")"
done

for step in flush-1-origin-written flush-2-origin-synced flush-3-marked-clean; do
  steps=$((steps + 1))
  fresh || continue
  arm
  run flush vol && fail "flush succeeded"
  crashed
  restart
  run flush vol || fail "flush after the restart: $(cat "$W/out")"
  expect_data
done

for step in mode-1-cleaned mode-2-saved; do
  steps=$((steps + 1))
  fresh || continue
  arm
  run set vol --mode writethrough && fail "set --mode succeeded"
  crashed
  restart
  mode=$(grep -o 'writeback\|writethrough' "$W/out" | head -1)
  want=writeback; [ $step = mode-2-saved ] && want=writethrough
  [ "$mode" = $want ] || fail "after the crash the mode is '$mode', wanted $want"
  expect_data
done

for step in detach-1-flushed detach-2-shut-down detach-3-superblock-erased; do
  steps=$((steps + 1))
  fresh || continue
  arm
  run detach vol && fail "detach succeeded"
  crashed
  if [ $step = detach-3-superblock-erased ]; then
    run start vol; rc=$?
    [ $rc -eq 4 ] && grep -q "run 'cachectl detach vol' to finish it" "$W/out" ||
      fail "start after the cache device was released: exit $rc: $(cat "$W/out")"
    run detach vol && grep -q "finished an interrupted detach" "$W/out" ||
      fail "detach to finish: $(cat "$W/out")"
    check origin.img -c 'read -P 0x11 0 4M' -c 'read -P 0x22 4M 4M' -c 'read -P 0x11 8M 8M'
  else
    restart
    expect_data
  fi
  [ ! -d "$W/state/vol" ] || fail "state left after the detach"
  attach || fail "attach after the detach: $(cat "$W/out")"
  run detach vol
done

# Adding a volume: after the crash the volume is served (the store's table
# had it before the first step), with its data, beside the first.
vnbd() { echo "nbd:unix:$W/run/vol/nbd:exportname=vb"; }
for step in add-1-table-saved add-2-line-space-saved; do
  steps=$((steps + 1))
  fresh || continue
  truncate -s 8M "$W/b.img"
  qemu-io -f raw "$W/b.img" -c 'write -P 0x33 0 8M' >/dev/null
  arm
  run add vol --origin "$W/b.img" --volume vb && fail "add succeeded"
  crashed
  grep -q "died during the add" "$W/err" || fail "the interrupted add said: $(cat "$W/err")"
  restart
  qemu-io -f raw "$(vnbd)" -c 'read -P 0x33 0 8M' -c 'write -P 0x44 0 1M' -c flush >"$W/io" 2>&1 &&
    ! grep -q "verification failed\|error" "$W/io" || fail "volume vb after the crash: $(tail -3 "$W/io")"
  run remove vol --volume vb || fail "remove vb: $(cat "$W/out")"
  qemu-io -f raw "$W/b.img" -c 'read -P 0x44 0 1M' -c 'read -P 0x33 1M 7M' >"$W/io" 2>&1 &&
    ! grep -q "verification failed\|error" "$W/io" || fail "b.img after the removal: $(tail -3 "$W/io")"
  expect_data
done

# Removing a volume with dirty data: after the crash the volume is either
# gone (its data on its origin) or not served until remove runs again.
for step in remove-1-marked remove-2-dropped remove-3-forgotten; do
  steps=$((steps + 1))
  fresh || continue
  truncate -s 8M "$W/b.img"
  run add vol --origin "$W/b.img" --volume vb || { fail "add: $(cat "$W/out")"; continue; }
  qemu-io -f raw "$(vnbd)" -c 'write -P 0x55 0 4M' -c flush >/dev/null 2>&1 || fail "writing to vb"
  arm
  run remove vol --volume vb && fail "remove succeeded"
  crashed
  grep -q "died during the remove" "$W/err" || fail "the interrupted remove said: $(cat "$W/err")"
  restart
  if [ $step = remove-3-forgotten ]; then
    run remove vol --volume vb; [ $? -eq 3 ] || fail "remove of a volume already gone: $(cat "$W/out")"
  else
    grep -q "run 'cachectl remove vol --volume vb'" "$W/out" || fail "start does not say to finish the removal: $(cat "$W/out")"
    run remove vol --volume vb || fail "remove again: $(cat "$W/out")"
  fi
  grep -q "vb" "$W/state/vol/volumes.conf" 2>/dev/null && fail "volumes.conf still lists vb"
  qemu-io -f raw "$W/b.img" -c 'read -P 0x55 0 4M' >"$W/io" 2>&1 && ! grep -q "verification failed\|error" "$W/io" ||
    fail "b.img after the removal: $(tail -3 "$W/io")"
  expect_data
done

# A detach of a stopped cache starts it, cleans it and detaches it.
step=detach-stopped
fresh && run stop vol && run detach vol || fail "detach of a stopped cache: $(cat "$W/out")"
check origin.img -c 'read -P 0x11 0 4M' -c 'read -P 0x22 4M 4M' -c 'read -P 0x11 8M 8M'

[ -n "${CACHECTL_FIGURES:-}" ] && echo "crash_steps $steps" >>"$CACHECTL_FIGURES"
[ $failures -eq 0 ] && echo "PASS: a crash at each of $steps steps" || { echo "$failures failures"; exit 1; }
