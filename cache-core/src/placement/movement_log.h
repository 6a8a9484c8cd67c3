// MovementLog: the engine's data movement per hour over the last day,
// built from running totals sampled every few seconds (nothing on the I/O
// path). Not thread-safe; the engine guards it.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "cachecore/placement/placement.h"

namespace cachecore {

// Running totals since the engine started; any of them may restart from 0
// (stats reset), which the log takes as a new start for that counter.
struct MovementTotals {
  uint64_t promotions = 0, demotions = 0, cleaner_writes = 0, cleaned_bytes = 0;
  uint64_t placement_promotions = 0, placement_demotions = 0, pin_fills = 0;
};

class MovementLog {
 public:
  // Adds what moved since the last sample to the hour of `now` (Unix seconds).
  void Sample(int64_t now, const MovementTotals& totals);
  // The 24 hours up to the one of `now`, oldest first; an hour with nothing
  // recorded has zeros.
  std::vector<MovementHour> LastDay(int64_t now) const;

  // The hours, for the store; Decode ignores what it cannot read.
  std::string Encode() const;
  void Decode(const std::string& text);

 private:
  std::array<MovementHour, 24> hours_{};  // by hour % 24; hour_start says which
  std::optional<MovementTotals> last_;
};

}  // namespace cachecore
