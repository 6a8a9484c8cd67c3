#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (AddressSanitizer and
# UndefinedBehaviorSanitizer on) into build-fuzz/ and runs each for SECONDS
# (default 60) from its seed corpus in tests/fuzz/corpus. Any crash, leak
# or sanitizer report fails; the input that did it is left in build-fuzz/.
# Usage: tests/fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCACHECTL_FUZZ=ON \
  -DCACHECTL_WERROR=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzzers
status=0
for target in fuzz_superblock fuzz_line_record fuzz_trace_line fuzz_nbd fuzz_control fuzz_dispatch; do
  corpus=build-fuzz/corpus/$target
  mkdir -p "$corpus"
  cp -n tests/fuzz/corpus/$target/* "$corpus"/ 2>/dev/null || true
  echo "== $target for ${seconds}s"
  if ! (cd build-fuzz && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        ./tests/fuzz/$target -max_total_time="$seconds" -print_final_stats=1 \
        -artifact_prefix="$target-" "corpus/$target" >"$target.log" 2>&1); then
    echo "FAIL: $target"
    status=1
  fi
  tail -20 "build-fuzz/$target.log"
  execs=$(grep -o 'number_of_executed_units: [0-9]*' "build-fuzz/$target.log" | grep -o '[0-9]*$' || echo 0)
  if [ -n "${CACHECTL_FIGURES:-}" ]; then echo "fuzz_execs_$target ${execs:-0}" >>"$CACHECTL_FIGURES"; fi
done
exit $status
