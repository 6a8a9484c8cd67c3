#!/usr/bin/env bash
# Benchmarks (never part of the tests' pass or fail): sets up and builds,
# runs scripts/bench/bench.py, keeps its JSON in build/bench/, and rewrites
# the measured part of docs/benchmarks.md.
# Usage: bash scripts/bench/run.sh [--quick | --full]   (as root; quick: ~12 min, full: ~1 h)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
# The plots' one extra package, for the benchmarks alone.
dpkg -s python3-matplotlib >/dev/null 2>&1 || apt-get install -y -q python3-matplotlib >/dev/null
mode=${1:---quick}
mkdir -p build/bench
json=build/bench/results-$(date -u +%Y%m%dT%H%M%S).json
report=$(/usr/bin/python3 scripts/bench/bench.py --build build --out "$json" --plots docs/bench "$mode")
/usr/bin/python3 - "$report" "$json" "$mode" <<'PY'
import re, sys
path = "docs/benchmarks.md"
text = open(path).read()
block = ("<!-- results:begin -->\n" + sys.argv[1] + "\nReproduce: `bash scripts/bench/run.sh " + sys.argv[3] +
         "` (results JSON: `" + sys.argv[2] + "`).\n<!-- results:end -->")
text = re.sub(r"<!-- results:begin -->.*?<!-- results:end -->", lambda m: block, text, flags=re.S)
open(path, "w").write(text)
PY
echo "bench: $json; docs/benchmarks.md updated"
