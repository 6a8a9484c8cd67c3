#include "cachecore/base/clock.h"

#include <ctime>

namespace cachecore {

namespace {

class SystemClockImpl final : public Clock {
 public:
  int64_t NowSeconds() const override { return static_cast<int64_t>(std::time(nullptr)); }
  uint32_t LocalMinuteOfDay(int64_t seconds) const override {
    std::time_t t = static_cast<std::time_t>(seconds);
    std::tm local{};
    localtime_r(&t, &local);
    return static_cast<uint32_t>(local.tm_hour * 60 + local.tm_min);
  }
};

}  // namespace

Clock* SystemClock() {
  static SystemClockImpl* const clock = new SystemClockImpl;  // never destroyed: usable at exit
  return clock;
}

}  // namespace cachecore
