#!/usr/bin/env bash
# The unit tests again, built with clang under AddressSanitizer,
# UndefinedBehaviorSanitizer and LeakSanitizer (in build-fuzz/, the tree
# tests/fuzz/run.sh configures). Any report fails the test.
set -euo pipefail
cd "$(dirname "$0")/.."
units=(block_device_contract_test slot_structures_test policy_candidates_test adaptive_policy_test slot_table_memory_test warm_start_test snapshot_start_test fault_device_test metadata_store_test engine_test engine_fault_test engine_batch_test engine_cleaning_test probe_unit_test placement_test
       engine_durability_test engine_identity_test engine_concurrency_test engine_model_test engine_stress_test engine_race_test metadata_failure_test
       superblock_repair_test ublk_request_test replay_test advise_test
       nbd_interop_test fault_matrix_test dirty_map_test wipe_test hdd_model_test protocol_test
       thread_annotations_test reactor_test engine_async_test engine_async_through_test engine_async_edges_test nbd_device_depth_test checksum_test
       stripe_lock_test nbd_async_test engine_pressure_test writeback_controller_test stats_view_test
       nbd_tls_test nvme_export_test prometheus_test history_test slot_table_victim_test
       volume_set_test engine_volumes_test nbd_exports_test encryption_test ram_tier_test)
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCACHECTL_FUZZ=ON \
  -DCACHECTL_WERROR=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${units[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# The power-cut loop's full 1,000 cycles run in the plain build; here a
# fifth of them, for the sanitizers' sake.
export CACHECTL_POWER_CUT_CYCLES=25
# The concurrent crash model: 5 power cuts a seed instead of 20.
export CACHECTL_MODEL_CUTS=5
# The three that replay whole shared traces (over six minutes under the
# sanitizers, most of CI's time here) run in the plain build only: their
# parsers are fuzzed, and the engine paths they drive run here in the
# shorter tests.
ctest --test-dir build-fuzz --output-on-failure -j"$(nproc)" -LE script \
  -E '^(AdviseTest\.CurveMatchesReplayAtThreeSizes|AdviseTest\.SampledCurveStaysClose|ReplayTest\.ArcP2AtTenPercentBeatsLru)$'
