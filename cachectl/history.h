// A day of a cache's counters a minute at a time, for stats --history: the
// daemon adds the cumulative counters once a minute, the ring keeps what
// happened in each minute (the difference from the minute before) and the
// dirty lines at its end. In memory: a restart starts a new day.
// Thread-safe: the daemon's sampler adds, control requests read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "protocol.h"

namespace cachectl {

class History {
 public:
  static constexpr size_t kMinutesADay = 24 * 60;
  explicit History(size_t capacity = kMinutesADay) : capacity_(capacity) {}

  // The counters since start (or since the last reset) at `minute_start`;
  // its minute keeps their growth since the previous sample. A counter
  // that went down was reset in between: the minute keeps its value. The
  // first sample only sets the base (nothing is known of its minute).
  void Add(const HistoryMinute& cumulative);
  // The minutes kept, oldest first.
  std::vector<HistoryMinute> Minutes() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::optional<HistoryMinute> last_;   // under mu_: the previous sample
  std::vector<HistoryMinute> ring_;     // under mu_: at most capacity_
  size_t next_ = 0;                     // under mu_: where the next minute goes once full
};

}  // namespace cachectl
