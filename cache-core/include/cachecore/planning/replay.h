// Trace replay: drives the real engine (memory devices, a sparse origin,
// metadata in an in-memory RocksDB) with a recorded block trace and reports
// the hit ratios the engine's own statistics give.
#pragma once

#include <cstdint>
#include <string>

#include "cachecore/engine/cache_mode.h"
#include "cachecore/engine/stats.h"
#include "cachecore/base/status.h"
#include "cachecore/planning/trace_reader.h"
#include "cachecore/policy/eviction_policy.h"

namespace cachecore {

// A cache size given as bytes ("64M") or as a share of the trace's
// footprint in 4 KiB blocks ("10%").
struct CacheSize {
  bool is_percent = false;
  double percent = 0;
  uint64_t bytes = 0;
};
Result<CacheSize> ParseCacheSize(const std::string& text);

struct ReplayOptions {
  std::string trace_path;
  TraceFormat format = TraceFormat::kCsv;
  CacheSize cache_size;
  uint32_t line_size = 4096;
  // Writes allocate, as the reference simulators do: in write-through,
  // which caches what it writes and keeps every line clean, so each
  // eviction takes the policy's own choice (write-back without its
  // cleaner would fill with dirty lines and then go around the cache).
  CacheMode mode = CacheMode::kWriteThrough;
  uint64_t sequential_cutoff = 0;  // off: the reference simulators have none
  PolicyKind policy = PolicyKind::kAdaptive;  // the engine's default
  uint32_t promote_after_hits = 1;          // S3-FIFO's (1: T2, 0: T1), the engine's default
  uint64_t ram_cache_bytes = 0;             // a RAM tier above the cache (EngineConfig's), 0: none
};

struct ReplayResult {
  uint64_t requests = 0;
  uint64_t footprint_blocks = 0;  // distinct 4 KiB blocks the trace touches
  uint64_t cache_lines = 0;
  uint64_t accesses = 0;          // 4 KiB block accesses (reads + writes)
  StatsSnapshot stats;            // the engine's own counters after the run
};

// kNotFound for a missing trace, kInvalidArgument for a malformed one or a
// cache smaller than two lines.
Result<ReplayResult> ReplayTrace(const ReplayOptions& options);

}  // namespace cachecore
