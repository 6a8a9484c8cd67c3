#!/usr/bin/env bash
# cachectl probe and attach --overprovision, as a user meets them: a read
# probe changes nothing; a write probe is refused on a device that holds a
# filesystem or a cache (nothing written) unless --force; the
# over-provisioning sweep gives a table, a recommendation and a plot; attach
# leaves the share it is told unused and stats shows it. Wrong input: one line.
# Usage: probe_test.sh PATH/TO/cachectl
set -u
C=$1
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
cleanup() {
  for p in "$W"/run/*/pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# run CODE PATTERN ARGS...: the exit code, and for a failure one line matching PATTERN.
run() {
  local code=$1 pattern=$2
  shift 2
  "$C" "$@" >"$W/out" 2>"$W/err"
  local rc=$?
  [ $rc -eq "$code" ] || { fail "cachectl $*: exit $rc, wanted $code: $(cat "$W/err")"; return; }
  if [ "$code" -ne 0 ]; then
    [ "$(wc -l <"$W/err")" -eq 1 ] && grep -q -- "$pattern" "$W/err" || fail "cachectl $*: stderr: $(cat "$W/err")"
  fi
}
json() { /usr/bin/python3 -c "import json,sys; r=json.load(open('$W/out')); sys.exit(0 if ($1) else 1)" ||
         fail "$2: $(cat "$W/out")"; }

echo "== a read probe changes nothing"
truncate -s 64M "$W/ssd.img"
head -c 8M /dev/urandom | dd of="$W/ssd.img" conv=notrunc status=none
before=$(sha256sum <"$W/ssd.img")
run 0 "" probe "$W/ssd.img" --duration 0.5 --json
json 'r["seq_read_mb_s"] > 0 and r["rand_read_4k_iops"] > 0 and r["seq_write_mb_s"] is None and r["bytes"] == 64 << 20' "read probe"
[ "$(sha256sum <"$W/ssd.img")" = "$before" ] || fail "a read probe changed the device"
run 0 "" probe "$W/ssd.img" --duration 0.3
grep -q "^rand read" "$W/out" || fail "probe text lacks 'rand read': $(cat "$W/out")"

echo "== a write probe"
run 0 "" probe "$W/ssd.img" --write --duration 0.5 --json
json 'r["seq_write_mb_s"] > 0 and r["rand_write_4k_iops"] > 0' "write probe"

echo "== refused over a filesystem unless --force"
truncate -s 64M "$W/fs.img"
mkfs.ext4 -q -F "$W/fs.img" || fail "mkfs.ext4"
before=$(sha256sum <"$W/fs.img")
run 4 "holds an ext2/ext3/ext4 filesystem; --write would destroy it" probe "$W/fs.img" --write --duration 0.3
run 4 "holds an ext2/ext3/ext4 filesystem" probe "$W/fs.img" --overprovision-sweep --write --duration 0.3
[ "$(sha256sum <"$W/fs.img")" = "$before" ] || fail "a refused probe changed the filesystem"
run 0 "" probe "$W/fs.img" --write --force --duration 0.3

echo "== refused over a cache"
truncate -s 256M "$W/origin.img"
truncate -s 64M "$W/cache.img"
run 0 "" attach --origin "$W/origin.img" --cache "$W/cache.img" --name p --frontend socket
run 0 "" stop p
run 4 "holds a cachectl cache" probe "$W/cache.img" --write --duration 0.3
run 0 "" probe "$W/cache.img" --duration 0.3
run 0 "" start p
run 0 "" detach p

echo "== the over-provisioning sweep"
truncate -s 48M "$W/op.img"
plot=$W/op.png
run 0 "" probe "$W/op.img" --overprovision-sweep --write --duration 0.3 --json --plot "$plot"
json '[p["unused_pct"] for p in r["points"]] == [0, 10, 20, 30] and all(p["rand_write_4k_iops"] > 0 for p in r["points"]) and r["recommended_unused_pct"] in (0, 10, 20, 30)' "sweep"
[ "$(head -c 4 "$plot" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "the sweep's --plot wrote no PNG"
run 0 "" probe "$W/op.img" --overprovision-sweep --write --duration 0.2
grep -q "^recommended: leave" "$W/out" || fail "sweep text lacks the recommendation: $(cat "$W/out")"

echo "== attach --overprovision"
truncate -s 65M "$W/cache2.img"
run 2 "must be 0 to 90" attach --origin "$W/origin.img" --cache "$W/cache2.img" --name q --overprovision 95
run 0 "" attach --origin "$W/origin.img" --cache "$W/cache2.img" --name q --frontend socket --line-size 64K --overprovision 25
run 0 "" stats q --json
# 64 MiB of data area: 25 % unused is 16 MiB, 768 lines of 64 KiB remain.
json 'r["overprovisioned_bytes"] == 16 << 20 and r["capacity_lines"] == 768' "stats after --overprovision 25"
run 0 "" detach q

echo "== wrong input"
run 2 "probe: .*device" probe
run 1 "cannot open $W/none" probe "$W/none"
run 2 "duration must be" probe "$W/ssd.img" --duration 0
run 2 "add --write" probe "$W/ssd.img" --overprovision-sweep
run 2 "plot draws the --overprovision-sweep" probe "$W/ssd.img" --plot "$W/x.png"
run 2 "cannot write /nonexistent/x.png" probe "$W/ssd.img" --overprovision-sweep --write --plot /nonexistent/x.png

if [ $failures -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "probe_test: all passed"
