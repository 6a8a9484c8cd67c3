#include "cachecore/engine/stats.h"

namespace cachecore {

namespace {
uint64_t Load(const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); }
double Ratio(uint64_t hits, uint64_t misses) {
  uint64_t total = hits + misses;
  return total == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(total);
}
}  // namespace

double StatsSnapshot::read_hit_ratio() const { return Ratio(read_hits, read_misses); }
double StatsSnapshot::hit_ratio() const {
  return Ratio(read_hits + write_hits, read_misses + write_misses);
}

double StatsSnapshot::ram_hit_ratio() const {
  const uint64_t reads = read_hits + read_misses;
  return reads == 0 ? 0.0 : static_cast<double>(ram_hits) / static_cast<double>(reads);
}

double VolumeInfo::read_hit_ratio() const { return Ratio(read_hits, read_misses); }
double VolumeInfo::hit_ratio() const { return Ratio(read_hits + write_hits, read_misses + write_misses); }

void LiveStats::Taken() {
  uint64_t now = in_flight.fetch_add(1, std::memory_order_relaxed) + 1;
  uint64_t peak = peak_in_flight.load(std::memory_order_relaxed);
  while (now > peak && !peak_in_flight.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void LiveStats::ResetCounters() {
  for (auto* c : {&read_hits, &read_misses, &ram_hits, &write_hits, &write_misses, &read_full, &read_partial,
                  &read_miss_req, &write_full, &write_partial, &write_miss_req, &promotions,
                  &evictions, &bypassed, &bypassed_no_space, &cleaner_writes, &cleaned_blocks, &cache_read_err,
                  &cache_write_err, &cache_flush_err, &origin_read_err, &origin_write_err,
                  &origin_flush_err, &metadata_err, &checksum_repaired, &checksum_failed,
                  &throttled_writes, &read_requests, &write_requests, &read_bytes, &write_bytes}) {
    c->store(0, std::memory_order_relaxed);
  }
  peak_in_flight.store(Load(in_flight), std::memory_order_relaxed);
}

StatsSnapshot LiveStats::Snapshot(uint64_t capacity_lines, bool failed) const {
  StatsSnapshot s;
  s.read_hits = Load(read_hits);
  s.read_misses = Load(read_misses);
  s.write_hits = Load(write_hits);
  s.write_misses = Load(write_misses);
  s.ram_hits = Load(ram_hits);
  s.read_requests_full_hit = Load(read_full);
  s.read_requests_partial_hit = Load(read_partial);
  s.read_requests_miss = Load(read_miss_req);
  s.write_requests_full_hit = Load(write_full);
  s.write_requests_partial_hit = Load(write_partial);
  s.write_requests_miss = Load(write_miss_req);
  s.read_requests = Load(read_requests);
  s.write_requests = Load(write_requests);
  s.read_bytes = Load(read_bytes);
  s.write_bytes = Load(write_bytes);
  s.capacity_lines = capacity_lines;
  s.occupancy_lines = Load(occupancy_lines);
  s.dirty_lines = Load(dirty_lines);
  s.clean_lines = s.occupancy_lines - std::min(s.occupancy_lines, s.dirty_lines);
  s.promotions = Load(promotions);
  s.evictions = Load(evictions);
  s.bypassed = Load(bypassed);
  s.bypassed_no_space = Load(bypassed_no_space);
  s.cleaner_writes = Load(cleaner_writes);
  s.cleaned_blocks = Load(cleaned_blocks);
  s.cleaner_state = kCleanerStateNames[cleaner_state.load(std::memory_order_relaxed) % 4];
  s.writeback_rate_bytes = Load(writeback_rate_bytes);
  s.throttled_writes = Load(throttled_writes);
  s.requests_in_flight = Load(in_flight);
  s.peak_requests_in_flight = Load(peak_in_flight);
  s.errors.cache_read = Load(cache_read_err);
  s.errors.cache_write = Load(cache_write_err);
  s.errors.cache_flush = Load(cache_flush_err);
  s.errors.origin_read = Load(origin_read_err);
  s.errors.origin_write = Load(origin_write_err);
  s.errors.origin_flush = Load(origin_flush_err);
  s.errors.metadata = Load(metadata_err);
  s.errors.checksum_repaired = Load(checksum_repaired);
  s.errors.checksum_failed = Load(checksum_failed);
  s.failed = failed;
  return s;
}

}  // namespace cachecore
