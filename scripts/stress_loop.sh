#!/usr/bin/env bash
# Loops the concurrent crash model (tests/engine_stress_test.cc) for N
# minutes with the machine loaded: two instances per core at once, each with
# a random seed (both line sizes), one after another until the time is up.
# Prints the cycles (power cuts and clean restarts) run and every failure
# with its seed; exits non-zero if any run failed or hung.
#
# usage: scripts/stress_loop.sh MINUTES [TEST_BINARY]
#   TEST_BINARY defaults to build/tests/engine_stress_test. The cuts per run
#   are CACHECTL_MODEL_CUTS (default 20), as in the test; a failing run's
#   output is kept in the directory printed at the end.
set -euo pipefail

usage() { echo "usage: $0 MINUTES [TEST_BINARY]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 && $1 =~ ^[0-9]+$ && $1 -gt 0 ]] || usage
minutes=$1
binary=${2:-$(cd "$(dirname "$0")/.." && pwd)/build/tests/engine_stress_test}
[[ -x $binary ]] || { echo "$0: no test binary at $binary (build the engine_stress_test target)" >&2; exit 2; }

slots=$(( $(nproc) * 2 ))
deadline=$(( $(date +%s) + minutes * 60 ))
work=$(mktemp -d "${TMPDIR:-/tmp}/stress-loop-XXXXXX")
echo "stress loop: $slots instances at once for $minutes min; logs in $work"

# A seed no CI run uses (CI runs 1..20), below 2^31 (a gtest int parameter).
random_seed() { echo $(( ((RANDOM << 15) | RANDOM) % 2000000000 + 1000 )); }

# One slot: runs instances back to back until the deadline. Each run adds
# its seed to runs and leaves <seed>.figures (the cycles it ran) and, if it
# failed, <seed>.log.
run_slot() {
  while (( $(date +%s) < deadline )); do
    local seed log status=0
    seed=$(random_seed)
    log="$work/$seed.log"
    echo "$seed" >>"$work/runs"
    CACHECTL_MODEL_SEED_BASE=$seed CACHECTL_MODEL_SEEDS=1 CACHECTL_FIGURES="$work/$seed.figures" \
      timeout 900 "$binary" --gtest_filter='Seeds/EngineStressTest.*' >"$log" 2>&1 || status=$?
    if (( status == 0 )); then
      rm -f "$log"
    elif (( status == 124 )); then
      echo "seed $seed: hung (no result in 15 minutes)" >>"$log"
    fi
  done
}

for _ in $(seq "$slots"); do run_slot & done
wait

runs=$(wc -l <"$work/runs" 2>/dev/null || echo 0)
cycles=$(cat "$work"/*.figures 2>/dev/null | awk '$1 == "stress_cycles" { n += $2 } END { print n + 0 }')
cuts=$(cat "$work"/*.figures 2>/dev/null | awk '$1 == "stress_power_cuts" { n += $2 } END { print n + 0 }')
around=$(cat "$work"/*.figures 2>/dev/null | awk '$1 == "stress_bypassed_no_space" { n += $2 } END { print n + 0 }')
ram=$(cat "$work"/*.figures 2>/dev/null | awk '$1 == "stress_ram_hits" { n += $2 } END { print n + 0 }')
failures=0
for log in "$work"/*.log; do
  [[ -e $log ]] || continue
  failures=$((failures + 1))
  seed=$(basename "$log" .log)
  what=$(grep -m1 -E "seed [0-9]+, line size|hung|Assertion|Segmentation|terminate" "$log" || true)
  echo "FAILED seed $seed: ${what:-see $log}"
done
echo "stress loop: $runs runs (each both line sizes), $cycles cycles, $cuts power cuts, $around requests around a cache full of dirty lines, $ram blocks read from the RAM tier, $failures failed"
if (( failures > 0 )); then
  echo "rerun one with: CACHECTL_MODEL_SEED_BASE=<seed> CACHECTL_MODEL_SEEDS=1 $binary --gtest_filter='Seeds/*'"
  exit 1
fi
rm -rf "$work"
