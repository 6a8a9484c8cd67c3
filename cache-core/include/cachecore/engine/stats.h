// Statistics: plain counters the engine bumps with relaxed atomics, read by
// any thread at any time without stopping I/O.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

namespace cachecore {

// Errors by device and kind.
struct ErrorCounts {
  uint64_t cache_read = 0, cache_write = 0, cache_flush = 0;
  uint64_t origin_read = 0, origin_write = 0, origin_flush = 0;
  uint64_t metadata = 0;
  uint64_t checksum_repaired = 0;  // clean block failed, origin copy returned and rewritten
  uint64_t checksum_failed = 0;    // dirty block failed: EIO
};

struct StatsSnapshot {
  // 4 KiB block accesses: the unit of the hit ratios.
  uint64_t read_hits = 0, read_misses = 0, write_hits = 0, write_misses = 0;
  // The RAM tier: read hits it served (counted in read_hits too), its size
  // (0: off) and the bytes of blocks it holds now.
  uint64_t ram_hits = 0, ram_cache_bytes = 0, ram_used_bytes = 0;
  // Requests by outcome: all blocks hit, some hit, none hit.
  uint64_t read_requests_full_hit = 0, read_requests_partial_hit = 0, read_requests_miss = 0;
  uint64_t write_requests_full_hit = 0, write_requests_partial_hit = 0, write_requests_miss = 0;
  // Reads and writes as the front ends handed them to the engine, and their
  // bytes (failed ones too; a front end hands a write-zeroes over as writes
  // of up to 1 MiB).
  uint64_t read_requests = 0, write_requests = 0, read_bytes = 0, write_bytes = 0;
  uint64_t capacity_lines = 0, occupancy_lines = 0, dirty_lines = 0, clean_lines = 0;
  uint64_t promotions = 0, evictions = 0, bypassed = 0;
  // Lines of read misses and writes that went around the cache because no
  // free or clean slot was at hand (a dirty line is never cleaned for a
  // request: the cleaner keeps clean lines).
  uint64_t bypassed_no_space = 0;
  uint64_t cleaner_writes = 0, cleaned_blocks = 0;
  // The background cleaner (see docs/design.md, "Write-back under
  // pressure"): what its controller is doing ("idle", "controlled",
  // "backing off" while clients keep the origin busy, "flat out" above the
  // low watermark or under the reserve of clean lines), the bytes per
  // second it cleaned over its last second, and the write-back writes
  // delayed because dirty lines passed the high watermark.
  std::string cleaner_state = "idle";
  uint64_t writeback_rate_bytes = 0;
  uint64_t throttled_writes = 0;
  // The eviction policy and what it does now: "adaptive: small 10 %, T2,
  // ghost 1x (0 switches)" (the shape the adaptive policy chose), or a
  // candidate's name ("s3fifo").
  std::string policy;
  // Client requests (reads, writes, trims, syncs) the engine has taken and
  // not yet answered: now, and the most at once since start or reset (what
  // a front end's queue depth reaches inside the engine).
  uint64_t requests_in_flight = 0, peak_requests_in_flight = 0;
  ErrorCounts errors;
  bool failed = false;  // past the error threshold: new I/O passes through
  // A metadata write or sync failed: writes, trims and flushes fail with an
  // I/O error, reads go on, until the cache is restarted (stop, start).
  bool metadata_failed = false;

  double read_hit_ratio() const;
  double hit_ratio() const;
  // ram_hits / read block accesses: the share of reads served from RAM.
  double ram_hit_ratio() const;
};

// One volume of a cache (Engine::volumes()): where it lies in the line
// space and its own share of the counters.
struct VolumeInfo {
  uint32_t id = 0;
  std::string name;
  uint64_t base = 0, size = 0;  // bytes
  std::string origin_identity;
  bool removing = false;  // RemoveVolume began and has not finished
  std::optional<uint64_t> sequential_cutoff;  // its own; none: the cache's
  uint64_t read_hits = 0, read_misses = 0, write_hits = 0, write_misses = 0;
  uint64_t read_requests = 0, write_requests = 0, read_bytes = 0, write_bytes = 0;
  uint64_t occupancy_lines = 0, dirty_lines = 0;
  double read_hit_ratio() const;
  double hit_ratio() const;
};

// StatsSnapshot::cleaner_state's values, by LiveStats::cleaner_state.
inline constexpr const char* kCleanerStateNames[] = {"idle", "controlled", "backing off", "flat out"};

// The engine's live counters. Each field mirrors StatsSnapshot.
struct LiveStats {
  std::atomic<uint64_t> read_hits{0}, read_misses{0}, write_hits{0}, write_misses{0};
  std::atomic<uint64_t> ram_hits{0};
  std::atomic<uint64_t> read_full{0}, read_partial{0}, read_miss_req{0};
  std::atomic<uint64_t> write_full{0}, write_partial{0}, write_miss_req{0};
  std::atomic<uint64_t> read_requests{0}, write_requests{0}, read_bytes{0}, write_bytes{0};
  std::atomic<uint64_t> occupancy_lines{0}, dirty_lines{0};
  std::atomic<uint64_t> promotions{0}, evictions{0}, bypassed{0}, bypassed_no_space{0};
  std::atomic<uint64_t> cleaner_writes{0}, cleaned_blocks{0};
  std::atomic<uint64_t> writeback_rate_bytes{0}, throttled_writes{0};
  std::atomic<uint8_t> cleaner_state{0};  // an index into kCleanerStateNames
  std::atomic<uint64_t> cache_read_err{0}, cache_write_err{0}, cache_flush_err{0};
  std::atomic<uint64_t> origin_read_err{0}, origin_write_err{0}, origin_flush_err{0};
  std::atomic<uint64_t> metadata_err{0}, checksum_repaired{0}, checksum_failed{0};
  std::atomic<uint64_t> in_flight{0}, peak_in_flight{0};

  static void Bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  // A client request taken; Answered when its answer goes out.
  void Taken();
  void Answered() { in_flight.fetch_sub(1, std::memory_order_relaxed); }
  // Zeroes the access and error counters (not occupancy or dirty lines);
  // the peak in flight starts again from the requests in flight now.
  void ResetCounters();
  StatsSnapshot Snapshot(uint64_t capacity_lines, bool failed) const;
};

}  // namespace cachecore
