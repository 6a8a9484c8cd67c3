#!/usr/bin/env bash
# The crash loop: a cache on sparse files, a journaling writer on its NBD
# socket (tests/crash/journal_io.py), and `kill -9` of the daemon at a
# random moment: during writes, during a flush, during a mode switch or
# during a detach, and, after a finished detach, during the next attach (at
# one of its steps, CACHECTL_CRASH_AT). After each kill the cache comes back (`cachectl start`,
# or a fresh attach when the detach had finished) and every block must hold
# its last flushed write or a later one.
#
# Usage: crash_loop.sh PATH/TO/cachectl MODE CYCLES [LINE_SIZE]
# (CACHECTL_CRASH_CYCLES overrides CYCLES.) Prints "crash_cycles N" and the
# like, and appends them to $CACHECTL_FIGURES when set, for the report.
set -u
C=$1 MODE=$2 CYCLES=${CACHECTL_CRASH_CYCLES:-$3} LINE=${4:-64K}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3  # Debian's, where python3-libnbd lives
$PY -c 'import nbd' 2>/dev/null || { echo "FAIL: python3-libnbd is missing (run scripts/setup.sh)"; exit 1; }
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
cleanup() {
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
die() { echo "FAIL (cycle ${cycle:-0}): $*"; tail -5 "$W/state/vol/daemon.log" 2>/dev/null; exit 1; }

# 64 MiB volume, 16 MiB of cache: the writer's working set does not fit, so
# lines are evicted and cleaned while it runs.
truncate -s 64M "$W/origin.img"
truncate -s 17M "$W/ssd.img"
attach() {
  "$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --mode "$MODE" \
       --line-size "$LINE" --frontend socket "$@" >"$W/out" 2>&1 || die "attach: $(cat "$W/out")"
}
attach
"$C" set vol --dirty-high 50 --dirty-low 20 >/dev/null || die "set cleaner watermarks"
other_mode() { [ "$MODE" = writeback ] && echo writethrough || echo writeback; }
sock=$W/run/vol/nbd
state=$W/journal.json
RANDOM=$$
restarts=0 reattached=0 finished=0

for cycle in $(seq 1 "$CYCLES"); do
  $PY "$HERE/journal_io.py" write "$sock" "$state" "$cycle" >"$W/writer.out" 2>&1 &
  writer=$!
  sleep "0.$((RANDOM % 6 + 2))"
  op=
  case $((cycle % 5)) in
    2) "$C" flush vol >/dev/null 2>&1 & op=$! ;;
    3) "$C" set vol --mode "$(other_mode)" >/dev/null 2>&1 & op=$! ;;
    4) "$C" detach vol >/dev/null 2>&1 & op=$! ;;
  esac
  [ -n "$op" ] && sleep "0.$((RANDOM % 3))$((RANDOM % 10))"
  pid=$(cat "$W/run/vol/pid" 2>/dev/null)
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  # Gone before the restart: a process killed in the middle of I/O exits
  # once its requests are cancelled, and until then its control socket
  # still answers (start rightly says the cache is running).
  for _ in $(seq 1 200); do [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  wait "$writer" || die "writer: $(cat "$W/writer.out")"
  [ -n "$op" ] && wait "$op"
  # Back up: the cache restarts warm, or, where the detach had finished,
  # the origin alone holds the data and a new cache is attached over it.
  if [ -f "$W/state/vol/cache.conf" ] && ! "$C" start vol >"$W/out" 2>&1; then
    # Killed after the detach released the cache device: start says so,
    # and detach finishes the job.
    grep -q "detach that did not finish" "$W/out" || die "start after kill -9: $(cat "$W/out")"
    "$C" detach vol >"$W/out" 2>&1 || die "finishing the detach: $(cat "$W/out")"
    attach
    finished=$((finished + 1))
  elif [ -f "$W/state/vol/cache.conf" ]; then
    restarts=$((restarts + 1))
  else
    # The detach had finished: attach again, the first time killed at one
    # of attach's steps (it fails, and leaves nothing that needs --force).
    steps=(attach-1-store-formatted attach-2-superblock-written)
    step=${steps[RANDOM % 2]}
    CACHECTL_CRASH_AT=$step "$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol \
      --mode "$MODE" --line-size "$LINE" --frontend socket >"$W/out" 2>&1 && die "attach survived $step"
    attach
    reattached=$((reattached + 1))
  fi
  "$C" set vol --mode "$MODE" >/dev/null 2>&1 || die "set mode back to $MODE"
  $PY "$HERE/journal_io.py" verify "$sock" "$state" >"$W/verify.out" 2>&1 ||
    die "$(cat "$W/verify.out")"
done
"$C" detach vol >/dev/null || die "final detach"
$PY - "$state" "$MODE" <<'EOF' | tee -a "${CACHECTL_FIGURES:-/dev/null}"
import json, sys
s, mode = json.load(open(sys.argv[1])), sys.argv[2]
print(f"crash_cycles_{mode} {s['cycles']}")
print(f"crash_writes {s['writes']}")
print(f"crash_blocks_verified {s['verified']}")
EOF
echo "PASS: $CYCLES kill -9 cycles in $MODE ($restarts warm restarts, $reattached attaches after a finished detach, $finished interrupted detaches finished), no flushed write lost"
