#!/usr/bin/env bash
# The cachectl command line as a user meets it: wrong input gets one clear
# line and the right exit code; replay works on every shared trace.
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
"$cachectl" >/dev/null 2>"$err"; [ $? -eq 2 ] || fail "no arguments: wanted exit 2"
grep -q "usage: cachectl" "$err" || fail "no arguments: no usage text"
"$cachectl" --help | grep -q replay || fail "--help does not list replay"

for trace in "$traces"/*.csv.zst; do
  expect 0 "" -- replay --trace "$trace" --cache-size 5% --json
  for key in hit_ratio read_hit_ratio accesses cache_lines; do
    grep -q "\"$key\": [0-9]" "$out" || fail "replay $(basename "$trace"): no $key in $(cat "$out")"
  done
done
expect 0 "" -- replay --trace "$traces/arc_OLTP.csv.zst" --cache-size 16M --line-size 64K
grep -q "^hit ratio" "$out" || fail "replay text output lacks 'hit ratio': $(cat "$out")"

[ -n "${CACHECTL_FIGURES:-}" ] && echo "bad_inputs ${bad_inputs:-0}" >>"$CACHECTL_FIGURES"
if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "cli_test: all passed"
