// A set of origin lines kept as disjoint, merged intervals [first, end):
// the pinned ranges. Not thread-safe (the engine guards it with its mutex).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cachecore/base/status.h"

namespace cachecore {

class LineIntervals {
 public:
  using Interval = std::pair<uint64_t, uint64_t>;  // [first, end)

  void Add(uint64_t first, uint64_t end);
  // Takes [first, end) out; returns the intervals that were in the set.
  std::vector<Interval> Remove(uint64_t first, uint64_t end);
  bool Contains(uint64_t line) const;
  // The first line of the set at or after `line`, if any.
  std::optional<uint64_t> NextAtOrAfter(uint64_t line) const;
  // Lines of [first, end) already in the set.
  uint64_t Overlap(uint64_t first, uint64_t end) const;
  uint64_t total() const { return total_; }
  bool empty() const { return spans_.empty(); }
  // The intervals in order.
  std::vector<Interval> intervals() const { return {spans_.begin(), spans_.end()}; }

  // "first-end,first-end,..." (empty for no interval), for the store.
  std::string Encode() const;
  // kCorruption for text Encode could not have made.
  static Result<LineIntervals> Decode(const std::string& text);

 private:
  std::map<uint64_t, uint64_t> spans_;  // first -> end
  uint64_t total_ = 0;
};

}  // namespace cachecore
