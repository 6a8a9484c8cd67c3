#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up, build, then every test with
# ctest. Exits non-zero if anything fails (a test that cannot run fails).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ ! -d ../shared/traces ]; then
  echo "test: ../shared/traces is missing; the replay tests need it" >&2
  exit 1
fi
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
# Every parser that faces outside input, fuzzed for a minute each, and the
# unit tests again, all under AddressSanitizer and UndefinedBehaviorSanitizer.
bash tests/fuzz/run.sh "${CACHECTL_FUZZ_SECONDS:-60}"
bash tests/sanitizers.sh
