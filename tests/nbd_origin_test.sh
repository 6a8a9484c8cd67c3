#!/usr/bin/env bash
# An origin that is a network volume: nbdkit serves a file over NBD, and
# cachectl caches it (libnbd underneath). Attach by URI, read what the
# origin held, write back, kill -9 and start warm, flush, detach: the file
# behind nbdkit ends up with every byte. Bad URIs are refused in one line.
# Usage: nbd_origin_test.sh PATH/TO/cachectl
set -u
C=$1
for tool in nbdkit qemu-io; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed (run scripts/setup.sh)"; exit 1; }
done
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
cleanup() {
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  [ -f "$W/nbdkit.pid" ] && kill "$(cat "$W/nbdkit.pid")" 2>/dev/null && wait 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
vol() { echo "nbd:unix:$W/run/net/nbd"; }
io() { qemu-io -f raw "$@" >"$W/io" 2>&1 && ! grep -q "verification failed\|error" "$W/io" || fail "qemu-io $*: $(tail -2 "$W/io")"; }

truncate -s 128M "$W/origin.img"
truncate -s 32M "$W/ssd.img"
io "$W/origin.img" -c 'write -P 0x42 0 16M'
# In the foreground of a background job: stopped by its pid (and with us).
nbdkit --exit-with-parent -P "$W/nbdkit.pid" -U "$W/origin.sock" file file="$W/origin.img" &
# Ready once its pid file is written (the socket exists before it listens).
for _ in $(seq 100); do [ -s "$W/nbdkit.pid" ] && break; sleep 0.1; done
[ -s "$W/nbdkit.pid" ] || { echo "FAIL: nbdkit did not start"; exit 1; }
uri="nbd+unix:///?socket=$W/origin.sock"

echo "== bad URIs"
out=$("$C" attach --origin "$uri" --cache "$W/ssd.img" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "needs --name" || fail "no --name: exit $rc: $out"
out=$("$C" attach --origin "nbd+unix:///?socket=$W/nobody.sock" --cache "$W/ssd.img" --name x 2>&1); rc=$?
[ $rc -eq 3 ] && echo "$out" | grep -q "cannot connect" || fail "nobody there: exit $rc: $out"
out=$("$C" attach --origin "$W/origin.img" --cache "$uri" --name x 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "must be a local" || fail "NBD cache device: exit $rc: $out"

echo "== attach, read, write back"
"$C" attach --origin "$uri" --cache "$W/ssd.img" --name net --mode writeback --frontend socket >"$W/out" 2>&1 ||
  { echo "FAIL: attach: $(cat "$W/out")"; exit 1; }
out=$("$C" attach --origin "$uri" --cache "$W/ssd.img" --name net2 2>&1); rc=$?
[ $rc -eq 4 ] && echo "$out" | grep -q "in use by cache 'net'" || fail "same URI twice: exit $rc: $out"
"$C" set net --seq-cutoff 0 >/dev/null
io "$(vol)" -c 'read -P 0x42 0 16M' -c 'read -P 0x42 0 16M' -c 'write -P 0x61 32M 8M' -c 'flush'
"$C" stats net --json | grep -q '"read_hits": [1-9]' || fail "no read hits: $("$C" stats net --json)"

echo "== kill -9, start warm"
pid=$(cat "$W/run/net/pid"); kill -9 "$pid"
# Gone, sockets closed (a dying process may still accept for a moment).
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
"$C" start net >"$W/out" 2>&1 || fail "start: $(cat "$W/out")"
io "$(vol)" -c 'read -P 0x61 32M 8M' -c 'read -P 0x42 0 16M'

echo "== flush and detach: the file behind nbdkit has it all"
"$C" detach net >"$W/out" 2>&1 || fail "detach: $(cat "$W/out")"
io "$W/origin.img" -c 'read -P 0x42 0 16M' -c 'read -P 0x61 32M 8M'

[ $failures -eq 0 ] && echo "PASS: a network origin over NBD" || { echo "$failures failures"; exit 1; }
