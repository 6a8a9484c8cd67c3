#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up, build, then every test with
# ctest. Exits non-zero if anything fails (a test that cannot run fails).
set -euo pipefail
cd "$(dirname "$0")/.."
# Warnings are errors here (CI), not in a user's build.
export CACHECTL_WERROR=ON
bash scripts/setup.sh
# The tree with clang too, warnings as errors, with clang's thread-safety
# analysis of the lock annotations (cache-core/src/base/thread_annotations.h).
# Only the libraries, the binary and the annotations' test, unoptimized (the
# analysis needs no optimizer, and it halves the time): the tests run on the
# GCC build above.
CC=clang CXX=clang++ cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Debug \
  -DCACHECTL_WERROR=ON -DCACHECTL_THREAD_SAFETY=ON >/dev/null
cmake --build build-clang -j"$(nproc)" --target cachecore shim cachectl thread_annotations_test
# scripts/lint.sh (clang-tidy, clang-format) is not run here: clang-tidy
# takes about a minute a file on these machines, over an hour for the tree.
if [ ! -d ../shared/traces ]; then
  echo "test: ../shared/traces is missing; the replay tests need it" >&2
  exit 1
fi
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
# Every parser that faces outside input, fuzzed for 45 s each, and the
# unit tests again, all under AddressSanitizer and UndefinedBehaviorSanitizer.
bash tests/fuzz/run.sh "${CACHECTL_FUZZ_SECONDS:-45}"
bash tests/sanitizers.sh
