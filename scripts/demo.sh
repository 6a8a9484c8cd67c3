#!/usr/bin/env bash
# The main job, on sparse files: an origin holding known data and an SSD
# file. Attach a cache, run a read-heavy workload through the NBD socket
# (fio's nbd engine) while the hit ratio rises, write in write-back mode,
# show the cache's stats as a person reads them, flush with progress,
# detach, and check that the origin alone holds what was written.
set -euo pipefail
cd "$(dirname "$0")/.."
# CACHECTL_SKIP_SETUP=1: the build is done (the test suite runs this too).
[ "${CACHECTL_SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null
C=$PWD/build/cachectl/cachectl
W=$(mktemp -d)
export CACHECTL_RUN_DIR=$W/run CACHECTL_STATE_DIR=$W/state
trap '"$C" stop demo >/dev/null 2>&1 || true; rm -rf "$W"' EXIT
say() { printf '\n== %s\n' "$*"; }
show_stats() {
  "$C" stats demo --json | tr ',' '\n' | grep -E '"(mode|read_hit_ratio|hit_ratio|occupancy_lines|dirty_lines)"' \
    | tr -d ' {}' | tr '\n' ' '
  echo
}

say "an origin of 1 GiB holding 256 MiB of known data, and a 256 MiB SSD file"
truncate -s 1G "$W/origin.img"
truncate -s 256M "$W/ssd.img"
head -c 256M /dev/urandom > "$W/known.bin"
dd if="$W/known.bin" of="$W/origin.img" bs=1M conv=notrunc status=none
echo "known data: $(md5sum < "$W/known.bin" | cut -c1-32)"

say "cachectl attach --origin origin.img --cache ssd.img --name demo"
"$C" attach --origin "$W/origin.img" --cache "$W/ssd.img" --name demo
URI="nbd+unix:///demo?socket=$W/run/demo/nbd"

say "a read-heavy workload (4 KiB random reads, a hot set) through the NBD socket, three rounds"
for round in 1 2 3; do
  fio --name=read$round --ioengine=nbd --uri="$URI" --rw=randread --bs=4k --size=256M \
      --random_distribution=zipf:1.1 --number_ios=20000 --iodepth=16 --randseed=$round \
      --output-format=terse --terse-version=3 | awk -F';' 'NF > 50 {printf "round %s: %7d read IOPS   ", "'$round'", $8}'
  show_stats
done

say "cachectl set demo --mode writeback, then random writes"
"$C" set demo --mode writeback
fio --name=write --ioengine=nbd --uri="$URI" --rw=randwrite --bs=4k --size=256M --number_ios=20000 \
    --iodepth=16 --randseed=7 --output-format=terse --terse-version=3 | awk -F';' 'NF > 50 {printf "write: %7d IOPS   ", $49}'
show_stats

say "cachectl stats demo"
"$C" stats demo

say "what the client sees now (read back through the cache)"
expected=$(nbdcopy "$URI" - | md5sum | cut -c1-32)
echo "volume checksum: $expected"

say "cachectl flush demo"
"$C" flush demo

say "cachectl detach demo"
"$C" detach demo

say "the origin alone"
actual=$(md5sum < "$W/origin.img" | cut -c1-32)
echo "origin checksum: $actual"
if [ "$actual" != "$expected" ]; then
  echo "MISMATCH: the origin does not hold what was written" >&2
  exit 1
fi
echo "the origin holds exactly what was written"
