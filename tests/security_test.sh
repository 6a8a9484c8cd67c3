#!/usr/bin/env bash
# Who may use a cache, and what stays behind: the control and NBD sockets
# are root's alone unless a group is given at attach; a member of that group
# may do I/O and read stats but change nothing; nothing listens on TCP
# unless asked; `detach --wipe` leaves no data on the cache device; names
# that are not names are refused before anything happens.
# Usage: security_test.sh PATH/TO/cachectl
set -u
C=$1
for tool in setpriv nbdinfo ss qemu-io; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed (run scripts/setup.sh)"; exit 1; }
done
W=$(mktemp -d)
chmod 755 "$W"  # so that nobody can reach the run directory at all
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
cleanup() {
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# as_nobody [GROUP_ID] CMD...: run as uid 65534, in that supplementary group.
as_nobody() {
  local groups=--clear-groups
  [ "$1" != - ] && groups="--groups=$1"
  shift
  setpriv --reuid=65534 --regid=65534 $groups "$@"
}
uri() { echo "nbd+unix:///vol?socket=$W/run/vol/nbd"; }
truncate -s 64M "$W/origin.img" "$W/ssd.img"
attach() { "$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --frontend socket "$@" >"$W/out" 2>&1; }

echo "== root only by default"
attach || fail "attach: $(cat "$W/out")"
pid=$(cat "$W/run/vol/pid")
[ "$(stat -c %a "$W/run/vol/control")" = 600 ] || fail "control socket mode $(stat -c %a "$W/run/vol/control")"
[ "$(stat -c %a "$W/run/vol/nbd")" = 600 ] || fail "NBD socket mode $(stat -c %a "$W/run/vol/nbd")"
[ "$(stat -c %a "$W/run/vol")" = 700 ] || fail "run directory mode $(stat -c %a "$W/run/vol")"
as_nobody - nbdinfo "$(uri)" >/dev/null 2>&1 && fail "an unprivileged user reached the NBD socket"
as_nobody 100 nbdinfo "$(uri)" >/dev/null 2>&1 && fail "a group member reached the NBD socket with no group configured"
ss -ltnp 2>/dev/null | grep -q "pid=$pid," && fail "the daemon listens on TCP without --nbd-tcp: $(ss -ltnp | grep "pid=$pid,")"
"$C" detach vol >/dev/null || fail "detach"

echo "== NBD over TCP without TLS: a loopback address unless --insecure"
port=$((20000 + RANDOM % 20000))
before=$(stat -c '%y' "$W/origin.img" "$W/ssd.img")
for addr in "0.0.0.0:$port" ":$port"; do
  out=$("$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --nbd-tcp "$addr" 2>&1)
  rc=$?
  [ $rc -eq 2 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "neither encrypted nor authenticated" ||
    fail "--nbd-tcp $addr without --insecure: exit $rc: $out"
done
[ "$before" = "$(stat -c '%y' "$W/origin.img" "$W/ssd.img")" ] || fail "a refused TCP attach changed a device"
[ -z "$(ls "$W/state" 2>/dev/null)" ] || fail "a refused TCP attach left state: $(ls "$W/state")"
attach --nbd-tcp "127.0.0.1:$port" || fail "attach on loopback: $(cat "$W/out")"
ss -ltn | grep -q "127.0.0.1:$port " || fail "nothing listens on 127.0.0.1:$port"
# The daemon checks again at start: an address that is no longer loopback
# (here written into the saved configuration) is refused.
"$C" stop vol >/dev/null || fail "stop"
sed -i "s/^nbd_tcp=.*/nbd_tcp=0.0.0.0:$port/" "$W/state/vol/cache.conf"
out=$("$C" start vol 2>&1) && fail "start with a non-loopback address and no --insecure: $out"
echo "$out" | grep -q "neither encrypted nor authenticated" || fail "start's refusal: $out"
sed -i "s/^nbd_tcp=.*/nbd_tcp=127.0.0.1:$port/" "$W/state/vol/cache.conf"
"$C" start vol >/dev/null || fail "start on loopback again"
"$C" detach vol >/dev/null || fail "detach"
attach --nbd-tcp "0.0.0.0:$port" --insecure || fail "attach --insecure: $(cat "$W/out")"
ss -ltn | grep -q "0.0.0.0:$port " || fail "nothing listens on 0.0.0.0:$port"
"$C" detach vol >/dev/null || fail "detach"

echo "== a group given at attach"
out=$("$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --group no-such-group-here 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "no group named 'no-such-group-here'" || fail "unknown group: $out"
[ -z "$(ls "$W/state" 2>/dev/null)" ] || fail "a refused attach left state: $(ls "$W/state")"
attach --group users || fail "attach --group users: $(cat "$W/out")"
[ "$(stat -c '%a %G' "$W/run/vol/nbd")" = "660 users" ] || fail "NBD socket: $(stat -c '%a %G' "$W/run/vol/nbd")"
[ "$(stat -c '%a %G' "$W/run/vol/control")" = "660 users" ] || fail "control socket: $(stat -c '%a %G' "$W/run/vol/control")"
as_nobody 100 nbdinfo --size "$(uri)" >"$W/out" 2>&1 || fail "a group member cannot use the NBD socket: $(cat "$W/out")"
as_nobody - nbdinfo "$(uri)" >/dev/null 2>&1 && fail "a user outside the group reached the NBD socket"
# The control socket: a member may read stats, not change anything.
as_nobody 100 "$C" stats vol >"$W/out" 2>&1 || fail "a group member cannot read stats: $(cat "$W/out")"
for change in "flush vol" "stats vol --reset" "set vol --seq-cutoff 0"; do
  as_nobody 100 "$C" $change >"$W/out" 2>&1 && fail "a group member could $change"
  grep -q "permission denied" "$W/out" || fail "$change by a group member: $(cat "$W/out")"
done
# The group survives a restart.
"$C" stop vol >/dev/null && "$C" start vol >/dev/null || fail "stop/start"
[ "$(stat -c '%a %G' "$W/run/vol/nbd")" = "660 users" ] || fail "after start: $(stat -c '%a %G' "$W/run/vol/nbd")"

echo "== detach --wipe"
"$C" set vol --seq-cutoff 0 >/dev/null
qemu-io -f raw "nbd:unix:$W/run/vol/nbd" -c 'write -P 0xab 0 8M' -c 'read -P 0xab 0 8M' >/dev/null ||
  fail "write through the cache"
grep -c $'\xab\xab\xab\xab' "$W/ssd.img" >/dev/null || fail "the test data never reached the cache device"
"$C" detach vol --wipe >"$W/out" 2>&1 || fail "detach --wipe: $(cat "$W/out")"
cmp -s -n "$(stat -c %s "$W/ssd.img")" "$W/ssd.img" /dev/zero || fail "the cache device is not blank after --wipe"
qemu-io -f raw "$W/origin.img" -c 'read -P 0xab 0 8M' >/dev/null || fail "the origin lost the data"
attach || fail "attach on the wiped device: $(cat "$W/out")"
"$C" detach vol >/dev/null

echo "== names and sizes never reach a shell"
for bad in '../x' 'a;touch x' '$(touch x)' 'a b' '-x'; do
  out=$("$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" --name "$bad" 2>&1)
  [ $? -eq 2 ] || fail "name '$bad' accepted: $out"
done
out=$("$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" --line-size '4K;touch x' 2>&1)
[ $? -eq 2 ] || fail "line size '4K;touch x' accepted: $out"
[ ! -e x ] && [ ! -e "$W/x" ] || fail "a name reached a shell"
# Every verb that takes a name checks it before building a path from it: a
# detach of ../x would otherwise remove a directory beside the state dir.
mkdir -p "$W/x" "$W/state"
touch "$W/x/keep"
for verb in stats flush detach start stop set pin unpin pins check rebuild export unexport; do
  extra=
  case $verb in
    set) extra="--seq-cutoff 0" ;;
    pin|unpin) extra="--range 0:4096" ;;
    export) extra="--nvme-tcp 127.0.0.1:4420 --allow-any-host" ;;
  esac
  for bad in '../x' '../../x' '.' '..'; do
    out=$("$C" $verb "$bad" $extra 2>&1)
    rc=$?
    [ $rc -eq 2 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "not a valid cache name" ||
      fail "$verb '$bad': exit $rc: $out"
  done
done
[ -f "$W/x/keep" ] || fail "a verb given ../x removed what lies beside the state directory"
rm -rf "$W/x"

echo "== an export needs a kernel device, and says why"
attach || fail "attach: $(cat "$W/out")"
out=$("$C" export vol --nvme-tcp 127.0.0.1:4420 --allow-any-host 2>&1)
rc=$?
[ $rc -eq 4 ] && echo "$out" | grep -q "has no kernel device" || fail "export of a socket-only cache: exit $rc: $out"
[ ! -e "$W/state/vol/export.conf" ] || fail "a refused export was recorded"
out=$("$C" unexport vol 2>&1)
[ $? -eq 3 ] && echo "$out" | grep -q "is not exported" || fail "unexport of what is not exported: $out"
"$C" detach vol >/dev/null

echo "== the control socket's limits"
attach --group users || fail "attach: $(cat "$W/out")"
ctl=$W/run/vol/control
# A connection that sends nothing, or trickles its line a byte a second, is
# let go 5 s after it came.
got=$(timeout 30 python3 -c "
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(20)
start = time.time(); closed = s.recv(1) == b''; quiet = time.time() - start
t = socket.socket(socket.AF_UNIX); t.connect(sys.argv[1]); start = time.time()
try:
    while time.time() - start < 20:
        t.send(b'x'); time.sleep(1)
except OSError:
    pass
print(closed, round(quiet), round(time.time() - start))" "$ctl" 2>&1)
read -r closed quiet trickled <<<"$got"
[ "$closed" = True ] && [ "$quiet" -le 7 ] && [ "$trickled" -le 9 ] ||
  fail "idle control connections: closed=$closed after ${quiet}s, a trickling one after ${trickled}s ($got)"
# A group member holding the 32 places: the next member is refused in one
# line; root still gets in; once they are let go the member is served.
as_nobody 100 /usr/bin/python3 -c "
import socket, sys, time
held = []
for _ in range(32):
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); held.append(s)
time.sleep(4)" "$ctl" &
holder=$!
sleep 1
out=$(as_nobody 100 "$C" stats vol 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q "serving 32 control requests already" || fail "the 33rd control connection: $out"
"$C" stats vol >"$W/out" 2>&1 || fail "root was locked out by a group member's connections: $(cat "$W/out")"
wait $holder
sleep 2
as_nobody 100 "$C" stats vol >"$W/out" 2>&1 || fail "stats after the idle connections went: $(cat "$W/out")"
"$C" detach vol >/dev/null || fail "detach"

echo "== the NBD socket's limits"
attach --nbd-connections 8 || fail "attach: $(cat "$W/out")"
grep -q '"nbd_max_connections": 8' <("$C" stats vol --json) || fail "stats lacks the NBD limit"
python3 "$(dirname "$0")/nbd_door_test.py" "$W/run/vol/nbd" "$(cat "$W/run/vol/pid")" vol 8 ||
  fail "the NBD socket's limits (above)"
"$C" detach vol >/dev/null || fail "detach after the NBD limits"
out=$("$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" --name vol --nbd-connections 0 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "give 1 to 1024 clients" || fail "--nbd-connections 0: $out"

[ $failures -eq 0 ] && echo "PASS: sockets, group, TCP, wipe, names, control and NBD limits" || { echo "$failures failures"; exit 1; }
