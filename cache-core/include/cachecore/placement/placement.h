// Pinning and scheduled placement: what the engine reports and accepts.
//
// Pins: origin ranges kept in the cache, never evicted, filled in the
// background. At most kPinLimitPct of the cache's lines may be pinned, so
// the rest still caches by policy.
//
// Placement window: a daily span of local time. Inside it, the engine's
// mover brings the hottest regions of the last 24 hours into the cache and
// moves cold lines out to make room for them, at a bounded rate. Outside
// it (and when no window is set) only the normal admission policy decides.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cachecore/base/status.h"

namespace cachecore {

constexpr uint32_t kPinLimitPct = 50;
// How fast pins fill and placement moves data, unless set: bytes per second.
constexpr uint64_t kDefaultPlacementRate = 64ull << 20;

struct PinnedRange {
  uint64_t offset = 0, length = 0;  // whole lines
  uint64_t resident_bytes = 0;      // the lines of it in the cache now
};

struct PinReport {
  std::vector<PinnedRange> ranges;  // in origin order, merged
  uint64_t pinned_bytes = 0, resident_bytes = 0;
  uint64_t limit_bytes = 0;  // kPinLimitPct of the cache's lines
};

// Minutes of the day, [start, end); end 1440 is midnight. A window with
// start > end runs across midnight.
struct PlacementWindow {
  uint32_t start_minute = 0, end_minute = 0;
  bool Contains(uint32_t minute_of_day) const;
};

// "HH:MM-HH:MM" (24:00 allowed as an end). kInvalidArgument, saying what
// is wrong, for anything else or an empty window.
Result<PlacementWindow> ParsePlacementWindow(const std::string& text);
std::string FormatPlacementWindow(const PlacementWindow& window);

struct PlacementSettings {
  std::optional<PlacementWindow> window;  // none: placement off
  uint64_t rate_bytes_per_s = kDefaultPlacementRate;
};

// Data movement in one hour. Promotions and demotions count lines into and
// out of the cache by any cause; the placement_ and pin_ fields count the
// mover's share of them. cleaner_writes counts the cleaner's writes to the
// origin (coalesced I/Os, as in stats), cleaned_bytes what they carried.
struct MovementHour {
  int64_t hour_start = 0;  // Unix seconds, a multiple of 3600
  uint64_t promotions = 0, demotions = 0, cleaner_writes = 0, cleaned_bytes = 0;
  uint64_t placement_promotions = 0, placement_demotions = 0, pin_fills = 0;
};

// An origin region and its accesses (4 KiB blocks) in the last 24 hours.
struct HotRegion {
  uint64_t offset = 0, length = 0;
  uint64_t accesses = 0;
  uint64_t resident_bytes = 0;
};

struct MovementReport {
  std::vector<MovementHour> hours;  // the last 24 hours, oldest first, this hour last
  std::vector<HotRegion> hottest;   // the hottest regions, hottest first
  uint64_t region_bytes = 0;
};

}  // namespace cachecore
