// HeatMap: accesses (4 KiB blocks read or written) per origin region in
// each of the last 24 hours, for scheduled placement. Record() is a relaxed
// atomic add to the current hour's exact counter and runs on every request;
// AdvanceTo is called from one thread (the mover) at a time, the readers
// from any. The 23 past hours are kept in 16 bits each (exact below 2048,
// within 1/4096 above): 50 bytes a region rather than 96, which is most
// of what the engine holds that does not grow with the cache.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cachecore {

class HeatMap {
 public:
  static constexpr uint32_t kHours = 24;

  // Regions are whole lines, as few as keep their number <= max_regions.
  HeatMap(uint64_t origin_size, uint32_t line_size, uint32_t max_regions = 8192);

  void Record(uint64_t offset, uint64_t length);
  // Makes `hour` (hours since the epoch) the current one; the counters of
  // the hours it passes over are zeroed (a day or more: all of them). An
  // hour before the current one is ignored, unless it is a day or more
  // before: then the clock went back, and the map starts afresh.
  void AdvanceTo(int64_t hour);
  // Accesses of `region` over the last 24 hours.
  uint64_t DayHeat(uint32_t region) const;
  // The regions with any access in the last day as (accesses, region),
  // hottest first, ties in origin order; at most `limit` of them.
  std::vector<std::pair<uint64_t, uint32_t>> Ranked(size_t limit = SIZE_MAX) const;
  uint32_t regions() const { return regions_; }
  uint64_t region_bytes() const { return region_bytes_; }
  uint32_t RegionOf(uint64_t offset) const { return static_cast<uint32_t>(offset / region_bytes_); }

  // The counters and the current hour, for the store. Decode takes back
  // what Encode made for the same geometry; false (nothing changed) else.
  std::string Encode() const;
  bool Decode(const std::string& data);

 private:
  static constexpr uint32_t kPastHours = kHours - 1;
  // Hour h's code while it is one of the past 23: slot h mod 23.
  std::atomic<uint16_t>& Past(uint32_t region, int64_t hour) const {
    const int64_t slot = (hour % kPastHours + kPastHours) % kPastHours;
    return past_[size_t{region} * kPastHours + static_cast<size_t>(slot)];
  }
  // Zeroes every count (the hour stays).
  void Clear();
  // Makes the map's counts `counts`: per region, the 23 past hours oldest
  // first, then the current one (hour_'s).
  void Assign(const std::vector<uint64_t>& counts);
  uint64_t region_bytes_;
  uint32_t regions_;
  std::unique_ptr<std::atomic<uint32_t>[]> now_;   // the current hour, exact
  std::unique_ptr<std::atomic<uint16_t>[]> past_;  // HourCode of each past hour
  int64_t hour_ = -1;
};

}  // namespace cachecore
