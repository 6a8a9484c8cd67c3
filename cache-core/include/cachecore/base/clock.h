// Clock: the engine's calendar time. The heat map and the movement log count
// by hours since the epoch, and the placement window is a span of the
// daemon's local day; both come from here, so tests can set the time
// instead of waiting for it. (Short waits, such as the mover's tick, use
// std::chrono::steady_clock directly.)
//
// Threads: both calls may be made from any thread at any time.
#pragma once

#include <cstdint>

namespace cachecore {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall time: seconds since the epoch (UTC).
  virtual int64_t NowSeconds() const = 0;
  // The minute of the local day (0..1439) at `seconds` since the epoch.
  virtual uint32_t LocalMinuteOfDay(int64_t seconds) const = 0;
};

// The system's clock and time zone (std::time, localtime_r). Never null;
// lives as long as the process.
Clock* SystemClock();

}  // namespace cachecore
