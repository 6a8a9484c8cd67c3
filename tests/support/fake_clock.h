// FakeClock: a Clock the test sets. Its local time is UTC, so the minute
// of the day follows from the seconds alone, whatever the machine's zone.
// It also counts the reads of NowSeconds(): the engine's mover reads the
// clock once a tick, so a test can wait for the mover to have run.
#pragma once

#include <atomic>
#include <cstdint>

#include "cachecore/base/clock.h"

namespace cachecore::testing {

class FakeClock final : public Clock {
 public:
  // 2024-01-01 12:00:00 UTC: noon, at the start of an hour.
  static constexpr int64_t kNoon = 1704110400;

  explicit FakeClock(int64_t seconds = kNoon) : now_(seconds) {}

  int64_t NowSeconds() const override {
    reads_.fetch_add(1);
    return now_.load();
  }
  uint32_t LocalMinuteOfDay(int64_t seconds) const override {
    return static_cast<uint32_t>(((seconds % 86400) + 86400) % 86400 / 60);
  }

  void Set(int64_t seconds) { now_.store(seconds); }
  void Advance(int64_t seconds) { now_.fetch_add(seconds); }
  // Today (the day of the current time) at hh:mm.
  void SetTimeOfDay(uint32_t hour, uint32_t minute) {
    const int64_t now = now_.load();
    Set(now - ((now % 86400) + 86400) % 86400 + int64_t{hour} * 3600 + int64_t{minute} * 60);
  }
  uint64_t reads() const { return reads_.load(); }

 private:
  std::atomic<int64_t> now_;
  mutable std::atomic<uint64_t> reads_{0};
};

}  // namespace cachecore::testing
