#!/usr/bin/env bash
# The cachectl command line as a user meets it: wrong input gets one clear
# line and the right exit code; replay works on every shared trace; advise
# prints a curve, its JSON and its plot.
# Usage: cli_test.sh PATH/TO/cachectl PATH/TO/traces
set -u
cachectl=$1
traces=$2
failures=0 bad_inputs=0
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect CODE PATTERN -- ARGS...: exit code and a one-line stderr matching PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 3
  [ "$code" -ne 0 ] && bad_inputs=$((bad_inputs + 1))
  "$cachectl" "$@" >"$out" 2>"$err"
  local rc=$?
  [ "$rc" -eq "$code" ] || fail "cachectl $*: exit $rc, wanted $code"
  if [ "$code" -ne 0 ]; then
    [ "$(wc -l <"$err")" -eq 1 ] || fail "cachectl $*: wanted one line on stderr, got: $(cat "$err")"
    grep -q -- "$pattern" "$err" || fail "cachectl $*: stderr '$(cat "$err")' lacks '$pattern'"
  fi
}

expect 2 "unknown command 'bogus'" -- bogus
expect 2 "replay: .*--trace" -- replay --cache-size 10%
expect 2 "not a percentage" -- replay --trace "$traces/arc_P2.csv.zst" --cache-size 200%
expect 2 "unknown size suffix" -- replay --trace "$traces/arc_P2.csv.zst" --cache-size 12Q
expect 2 "line-size must be a power of two" -- replay --trace "$traces/arc_P2.csv.zst" --cache-size 1M --line-size 3K
expect 1 "cannot open trace /nonexistent.csv" -- replay --trace /nonexistent.csv --cache-size 1M
expect 2 "unknown policy 'clock' (adaptive, s3fifo, lru, arc or wtinylfu)" -- replay --trace "$traces/arc_P2.csv.zst" --cache-size 1M --policy clock
expect 2 "promote-after must be 0, 1 or 2" -- replay --trace "$traces/arc_P2.csv.zst" --cache-size 1M --policy s3fifo --promote-after 3
expect 2 "promote-after applies to --policy s3fifo only" -- replay --trace "$traces/arc_P2.csv.zst" --cache-size 1M --promote-after 0
expect 2 "promote-after applies to --policy s3fifo only" -- advise --trace "$traces/arc_P2.csv.zst" --policy arc --promote-after 1
# Each candidate runs and says which it was; the default, the adaptive
# policy, also says the shape it ended with.
for policy in s3fifo lru arc wtinylfu; do
  expect 0 "" -- replay --trace "$traces/tencent_cbs_sample.csv.zst" --cache-size 1% --policy "$policy" --json
  grep -q "\"policy\": \"$policy\"" "$out" || fail "replay --policy $policy: $(cat "$out")"
done
expect 0 "" -- replay --trace "$traces/tencent_cbs_sample.csv.zst" --cache-size 1% --json
grep -q '"policy": "adaptive", "promote_after_hits": null, "policy_state": "adaptive: small [0-9]* %, T[12], ghost [12]x ([0-9]* switch' "$out" ||
  fail "replay's default: $(cat "$out")"
"$cachectl" >/dev/null 2>"$err"; [ $? -eq 2 ] || fail "no arguments: wanted exit 2"
grep -q "usage: cachectl" "$err" || fail "no arguments: no usage text"
"$cachectl" --help | grep -q replay || fail "--help does not list replay"

for trace in "$traces"/*.csv.zst; do
  expect 0 "" -- replay --trace "$trace" --cache-size 5% --json
  for key in hit_ratio read_hit_ratio accesses cache_lines; do
    grep -q "\"$key\": [0-9]" "$out" || fail "replay $(basename "$trace"): no $key in $(cat "$out")"
  done
done
# A path with a quote still makes valid JSON.
odd=$(mktemp -d)/'a "quoted" trace.csv.zst'
cp "$traces/arc_P2.csv.zst" "$odd"
expect 0 "" -- replay --trace "$odd" --cache-size 1M --json
/usr/bin/python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["trace"] == sys.argv[2]' "$out" "$odd" || \
  fail "replay --json with a quote in the path: $(cat "$out")"
expect 0 "" -- advise --trace "$odd" --json
/usr/bin/python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["trace"] == sys.argv[2]' "$out" "$odd" || \
  fail "advise --json with a quote in the path: $(head -c 200 "$out")"
rm -rf "$(dirname "$odd")"
expect 0 "" -- replay --trace "$traces/arc_OLTP.csv.zst" --cache-size 16M --line-size 64K
grep -q "^hit ratio" "$out" || fail "replay text output lacks 'hit ratio': $(cat "$out")"

# advise: the curve, its JSON, the plot, and wrong input.
expect 2 "advise: .*--trace" -- advise --format csv
expect 2 "unknown trace format 'json'" -- advise --trace "$traces/arc_P2.csv.zst" --format json
expect 1 "cannot open trace /nonexistent.csv" -- advise --trace /nonexistent.csv
printf '0,R,0,4096\nnot a trace\n' >"$out.bad"
expect 2 "$out.bad:2:" -- advise --trace "$out.bad"
expect 2 "$out.bad:1: not a blkparse event line" -- advise --trace "$out.bad" --format blkparse
rm -f "$out.bad"
expect 0 "" -- advise --trace "$traces/tencent_cbs_sample.csv.zst" --json
/usr/bin/python3 - "$out" <<'PY' || fail "advise --json: $(head -c 300 "$out")"
import json, sys
r = json.load(open(sys.argv[1]))
assert [p["size_pct"] for p in r["curve"]] == list(range(1, 101))
assert all(0 <= p["hit_ratio"] <= 1 and 0 <= p["read_hit_ratio"] <= 1 for p in r["curve"])
assert all(a["hit_ratio"] <= b["hit_ratio"] + 0.01 for a, b in zip(r["curve"], r["curve"][1:]))
assert 1 <= r["recommended_size_pct"] <= 100
PY
plot=$(mktemp -u /tmp/cachectl-advise.XXXXXX.png)
expect 0 "" -- advise --trace "$traces/arc_P2.csv.zst" --plot "$plot"
grep -q "recommended" "$out" || fail "advise text output lacks the recommendation: $(cat "$out")"
[ "$(head -c 4 "$plot" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "advise --plot wrote no PNG to $plot"
rm -f "$plot"
expect 2 "cannot write /nonexistent/dir/x.png: No such file" -- advise --trace "$traces/arc_P2.csv.zst" --plot /nonexistent/dir/x.png

[ -n "${CACHECTL_FIGURES:-}" ] && echo "bad_inputs ${bad_inputs:-0}" >>"$CACHECTL_FIGURES"
if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "cli_test: all passed"
