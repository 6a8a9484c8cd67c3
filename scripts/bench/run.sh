#!/usr/bin/env bash
# Benchmarks (never part of the tests' pass or fail): sets up and builds,
# runs scripts/bench/bench.py, keeps its JSON in build/bench/, and rewrites
# the measured part of docs/benchmarks.md and its plots in docs/bench/.
# Usage: bash scripts/bench/run.sh [--quick | --full]   (as root; quick: ~13 min, full: ~1.7 h)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
mode=${1:---quick}
mkdir -p build/bench
json=build/bench/results-$(date -u +%Y%m%dT%H%M%S).json
/usr/bin/python3 scripts/bench/bench.py --build build --out "$json" --plots docs/bench \
  --docs docs/benchmarks.md "$mode" >/dev/null
echo "bench: $json; docs/benchmarks.md and docs/bench/ updated"
