// Cache sizing from a recorded workload: the hit ratio the cache would reach
// at every size from 1 % to 100 % of the workload's footprint (a miss-ratio
// curve), and the smallest size worth buying.
//
// The trace is read once. Accesses are kept for a spatial sample of the
// 4 KiB blocks (all of them when the footprint fits `max_sampled_blocks`;
// otherwise the blocks whose hash falls under a threshold lowered as the
// sample fills, as in SHARDS, Waldspurger et al., FAST 2015), and the
// engine's own eviction policy (S3-FIFO, or the one asked for) is simulated on that sample at each
// size, scaled by the sampling rate: a miniature simulation (ATC 2017), so
// the curve is that of cachectl's policy, not of LRU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cachecore/base/status.h"
#include "cachecore/planning/trace_reader.h"
#include "cachecore/policy/eviction_policy.h"

namespace cachecore {

struct AdviseOptions {
  std::string trace_path;
  TraceFormat format = TraceFormat::kCsv;
  uint64_t max_sampled_blocks = 1 << 21;  // 8 GiB of footprint simulated block for block
  PolicyKind policy = PolicyKind::kAdaptive;  // the policy simulated (EngineConfig's)
  uint32_t promote_after_hits = 1;          // S3-FIFO's setting (EngineConfig)
  double target_share = 0.9;              // of the achievable hit ratio, for the recommendation
  // A RAM tier of this size above the cache at every point (0: none): the
  // two-level cache's curve. It is simulated as the engine runs it: filled
  // by reads that hit the cache, forgotten by writes, S3-FIFO.
  uint64_t ram_cache_bytes = 0;
};

struct CurvePoint {
  uint32_t size_pct = 0;
  uint64_t cache_bytes = 0;
  double hit_ratio = 0;       // hits / 4 KiB block accesses (reads and writes)
  double read_hit_ratio = 0;  // read hits / read block accesses (0 without reads)
  double ram_hit_ratio = 0;   // reads served by the RAM tier / read block accesses (a share of read_hit_ratio)
};

struct AdviseResult {
  uint64_t requests = 0;
  uint64_t accesses = 0;          // 4 KiB block accesses
  uint64_t footprint_blocks = 0;  // distinct 4 KiB blocks (estimated when sampled)
  double sampling_rate = 1;       // share of blocks simulated
  std::vector<CurvePoint> curve;  // size_pct 1..100
  uint32_t recommended_size_pct = 0;  // smallest size reaching target_share of the best ratio
};

// kNotFound for a missing trace; kInvalidArgument for a malformed or empty one.
Result<AdviseResult> AdviseCacheSize(const AdviseOptions& options);

}  // namespace cachecore
