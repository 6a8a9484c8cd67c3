#!/usr/bin/env bash
# One cache, three volumes, end to end with real clients: three sparse-file
# origins on one SSD file, fio writing and verifying through the three NBD
# exports at once; bad adds and removes refused with one line, nothing
# changed; a stop and start serves all three again, warm; one volume removed
# while fio runs on the other two (their verify passes; the removed one's
# origin holds its data); detach; each origin alone passes fio's verify.
#
#   volumes_test.sh CACHECTL
set -uo pipefail
C=$(readlink -f "$1")
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cleanup() {
  for p in ${fio_pids:-}; do kill "$p" 2>/dev/null; done
  for n in $(ls "$W/state" 2>/dev/null); do
    pid=$(cat "$W/run/$n/pid" 2>/dev/null) && kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$W"
}
trap cleanup EXIT
cd "$W" || exit 1
command -v fio >/dev/null || { echo "FAIL: fio is not installed (scripts/setup.sh installs it)"; exit 1; }
fio --enghelp 2>/dev/null | grep -qw nbd || { echo "FAIL: this fio has no nbd engine"; exit 1; }
truncate -s 64M a.img
truncate -s 48M b.img
truncate -s 32M c.img
truncate -s 40M ssd.img
sock=$W/run/multi/nbd

# fio through an export: NAME SIZE then fio's own options.
fio_nbd() {
  local vol=$1 size=$2; shift 2
  fio --name="$vol" --ioengine=nbd --uri="nbd+unix:///$vol?socket=$sock" --size="$size" \
    --bs=4k --iodepth=16 --verify=crc32c --randseed=7 --output=/dev/null "$@"
}
# fio's verify of an origin file alone (the data written through the cache).
verify_file() {
  local file=$1 size=$2; shift 2
  fio --name=check --filename="$file" --size="$size" --bs=4k --verify=crc32c --randseed=7 \
    --verify_only --output=/dev/null "$@"
}

echo "== attach, add two volumes"
"$C" attach --origin a.img --cache ssd.img --name multi --frontend socket --mode writeback >out 2>&1 ||
  { cat out; echo "FAIL: attach"; exit 1; }
"$C" add multi --origin b.img --volume vb >out 2>&1 || { cat out; fail "add vb"; }
grep -q "nbd+unix:///vb" out || fail "add does not say where vb is served: $(cat out)"
"$C" add multi --origin c.img --volume vc >out 2>&1 || { cat out; fail "add vc"; }

echo "== bad adds and removes: one line each, nothing changed"
truncate -s 8M d.img
expect() {  # exit status, words, command...
  local want=$1 words=$2; shift 2
  "$C" "$@" >out 2>&1; local got=$?
  [ "$got" = "$want" ] || fail "'$*' exited $got, not $want: $(cat out)"
  grep -q "$words" out || fail "'$*' does not say '$words': $(cat out)"
  [ "$(wc -l <out)" = 1 ] || fail "'$*' printed more than one line: $(cat out)"
}
expect 4 "in use by cache 'multi'" add multi --origin b.img --volume again
expect 4 "in use by cache 'multi'" add multi --origin a.img --volume again
expect 2 "the same device" add multi --origin ssd.img --volume again
expect 4 "named vb already" add multi --origin d.img --volume vb
expect 4 "named multi already" add multi --origin d.img --volume multi
expect 2 "not a valid" add multi --origin d.img --volume ../x
expect 3 "does not exist" add multi --origin nothere.img --volume vx
expect 3 "no cache named" add nocache --origin d.img --volume vx
expect 2 "own export" add multi --origin "nbd+unix:///multi?socket=$sock" --volume vx
expect 2 "control character" add multi --origin $'d\nx.img' --volume vx
expect 4 "the cache's own" remove multi --volume multi
expect 3 "no volume nope" remove multi --volume nope
[ "$(cat "$W/state/multi/volumes.conf" | wc -l)" = 2 ] || fail "volumes.conf changed: $(cat "$W/state/multi/volumes.conf")"

echo "== fio on all three volumes at once"
fio_pids=""
fio_nbd multi 16M --rw=randwrite & fio_pids="$fio_pids $!"
fio_nbd vb 16M --rw=randwrite & fio_pids="$fio_pids $!"
fio_nbd vc 16M --rw=randwrite & fio_pids="$fio_pids $!"
for p in $fio_pids; do wait "$p" || fail "fio write+verify through one export failed"; done
fio_pids=""

echo "== stats per volume, list, metrics"
"$C" stats multi --volume vb --json >out 2>&1 || { cat out; fail "stats --volume vb"; }
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["volume"] == "vb" and s["name"] == "multi", s
assert int(s["write_requests"]) > 0 and int(s["occupancy_lines"]) > 0, s
assert int(s["size_bytes"]) == 48 << 20, s
' out || fail "stats --volume vb --json: $(cat out)"
"$C" stats multi --volume vc --csv >out 2>&1 && head -1 out | grep -q '^schema_version,name,volume,' ||
  fail "stats --volume vc --csv: $(cat out)"
expect 3 "no volume 'nope'" stats multi --volume nope
"$C" list >out 2>&1 && grep -q "+ volume vb" out && grep -q "+ volume vc" out || fail "list does not show the volumes: $(cat out)"
"$C" stats multi --prometheus >out 2>&1 && grep -q 'cachectl_volume_blocks_total{cache="multi",mode="writeback",volume="vc",result="write_miss"}' out ||
  fail "no per-volume metrics: $(grep volume out | head -3)"

echo "== a volume's own settings: its sequential cutoff, its pins"
"$C" set multi --volume vb --seq-cutoff 256K >out 2>&1 || fail "set --volume vb --seq-cutoff: $(cat out)"
"$C" stats multi --volume vb --json | grep -q '"seq_cutoff": 262144' || fail "vb's own cutoff is not in its stats"
"$C" stats multi --volume vc --json | grep -q '"seq_cutoff": "cache"' || fail "vc does not take the cache's cutoff"
"$C" set multi --volume vb --seq-cutoff cache >out 2>&1 || fail "set --volume vb --seq-cutoff cache: $(cat out)"
"$C" stats multi --volume vb --json | grep -q '"seq_cutoff": "cache"' || fail "vb did not go back to the cache's cutoff"
expect 2 "its own sequential cutoff alone" set multi --volume vb --mode writethrough
expect 3 "no volume named nope" set multi --volume nope --seq-cutoff 1M
"$C" pin multi --volume vc --range 1M:128K >out 2>&1 || fail "pin --volume vc: $(cat out)"
"$C" pins multi >out 2>&1 && grep -q "^vc 1048576:131072" out || fail "pins does not show vc's range: $(cat out)"
"$C" pins multi --json | grep -q '"volume": "vc", "offset": 1048576' || fail "pins --json lacks the volume"
expect 2 "beyond the volume (vc" pin multi --volume vc --range 31M:2M
"$C" unpin multi --volume vc --range 1M:128K >out 2>&1 || fail "unpin --volume vc: $(cat out)"
"$C" pins multi >out 2>&1 && ! grep -q "^vc " out || fail "vc's range is still pinned: $(cat out)"

echo "== stop and start: all three served again, warm"
"$C" stop multi >out 2>&1 || { cat out; fail "stop"; }
"$C" start multi >out 2>&1 || { cat out; fail "start"; }
for v in multi vb vc; do
  fio_nbd "$v" 16M --rw=randwrite --verify_only || fail "$v does not read back after a restart"
done

echo "== remove vc while fio runs on the other two"
# Paced (about 3 s of writes each), so that the removal falls in the middle.
fio_nbd multi 16M --rw=randwrite --offset=32M --rate_iops=1500 & fio_pids="$fio_pids $!"
fio_nbd vb 16M --rw=randwrite --offset=16M --rate_iops=1500 & fio_pids="$fio_pids $!"
sleep 1
running=0
for p in $fio_pids; do kill -0 "$p" 2>/dev/null && running=$((running + 1)); done
[ "$running" = 2 ] || fail "fio was not running on both volumes when vc was removed"
"$C" remove multi --volume vc >out 2>&1 || { cat out; fail "remove vc"; }
grep -q "removed volume vc" out || fail "remove does not say so: $(cat out)"
for p in $fio_pids; do wait "$p" || fail "fio on a volume that stayed failed while vc was removed"; done
fio_pids=""
verify_file c.img 16M --rw=randwrite || fail "c.img does not hold what was written through vc"
expect 3 "no volume vc" remove multi --volume vc
grep -q "vc" "$W/state/multi/volumes.conf" && fail "volumes.conf still lists vc"

echo "== detach: each origin alone holds its data"
"$C" detach multi >out 2>&1 || { cat out; fail "detach"; }
verify_file a.img 16M --rw=randwrite || fail "a.img lacks the first volume's data"
verify_file a.img 16M --rw=randwrite --offset=32M || fail "a.img lacks what was written while vc was removed"
verify_file b.img 16M --rw=randwrite || fail "b.img lacks vb's data"
verify_file b.img 16M --rw=randwrite --offset=16M || fail "b.img lacks what was written while vc was removed"

if [ "$failures" -gt 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "volumes_test: all passed"
