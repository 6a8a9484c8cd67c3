// The writeback controller alone, driven by counts: a model cache whose
// writers dirty a steady number of lines per tick and whose cleaner cleans
// what the controller allows. What a user relies on: dirty data settles at
// the target (not above it by the write rate), the cleaner backs off while
// clients use the origin, the hard limits override both, and cleaning comes
// in batches.
#include "../cache-core/src/engine/writeback_controller.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace cachecore::testing {
namespace {

constexpr uint64_t kCapacity = 10000;
constexpr double kTick = 0.1;  // seconds, as the cleaner's loop

struct ModelCache {
  WritebackController controller;
  WritebackController::Reading reading;
  uint64_t cleaned_total = 0;
  ModelCache() {
    reading.capacity_lines = kCapacity;
    reading.target_lines = 1000;     // 10 %
    reading.flat_out_lines = 4000;   // 40 %
    reading.reserve_lines = 200;     // 2 %
    reading.batch_lines = 64;
  }
  // One tick: `written` new dirty lines, then what the controller allows.
  uint64_t Tick(uint64_t written) {
    reading.dirty_lines = std::min(kCapacity, reading.dirty_lines + written);
    const uint64_t allowed = controller.Tick(reading, kTick);
    const uint64_t cleaned = std::min(allowed, reading.dirty_lines);
    reading.dirty_lines -= cleaned;
    controller.Spent(allowed, cleaned);
    cleaned_total += cleaned;
    return cleaned;
  }
};

TEST(WritebackControllerTest, DirtyLinesSettleAtTheTargetUnderASteadyWriteRate) {
  // From 1 to 30 % of the cache a second, starting empty and starting
  // at the low watermark: within 600 ticks (one minute) dirty lines stay
  // within 2 % of the cache from the target once cleaned, and not above it
  // by the rate (a proportional rule alone would settle at target + rate *
  // 2 s).
  for (uint64_t per_tick : {10, 50, 150, 300}) {
    for (uint64_t start : {uint64_t{0}, uint64_t{3900}}) {
      ModelCache m;
      m.reading.dirty_lines = start;
      for (int i = 0; i < 600; ++i) m.Tick(per_tick);
      for (int i = 0; i < 100; ++i) {
        m.Tick(per_tick);  // dirty lines rise by a tick's writes, then fall back
        EXPECT_NEAR(double(m.reading.dirty_lines), 1000.0, 200.0) << per_tick << " a tick from " << start;
      }
      EXPECT_EQ(m.controller.state(), WritebackController::State::kControlled);
    }
  }
}

TEST(WritebackControllerTest, NeverCleansBelowTheTarget) {
  ModelCache m;
  m.reading.dirty_lines = 999;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(m.Tick(0), 0u);
  EXPECT_EQ(m.controller.state(), WritebackController::State::kIdle);
  // After a burst, cleaning stops at the target, whatever it learned.
  m.reading.dirty_lines = 3000;
  for (int i = 0; i < 600; ++i) m.Tick(0);
  EXPECT_GE(m.reading.dirty_lines, 1000u - 64);
  EXPECT_LE(m.reading.dirty_lines, 1000u);
}

TEST(WritebackControllerTest, BacksOffToATrickleWhileTheOriginIsBusy) {
  ModelCache idle, busy;
  idle.reading.dirty_lines = busy.reading.dirty_lines = 3000;
  busy.reading.origin_busy = true;
  for (int i = 0; i < 100; ++i) {  // ten seconds
    idle.Tick(0);
    busy.Tick(0);
  }
  EXPECT_GT(idle.cleaned_total, 1500u);
  // One batch every kTrickleSeconds, no more.
  EXPECT_GT(busy.cleaned_total, 0u);
  EXPECT_LE(busy.cleaned_total, 64u);
  EXPECT_EQ(busy.controller.state(), WritebackController::State::kBackingOff);
  // The busy spell taught the integral nothing: once the origin is free it
  // cleans as one that was never busy.
  busy.reading.origin_busy = false;
  WritebackController fresh;
  busy.controller.Tick(busy.reading, kTick);
  fresh.Tick(busy.reading, kTick);
  EXPECT_NEAR(busy.controller.rate(), fresh.rate(), 0.05 * fresh.rate());
}

TEST(WritebackControllerTest, TheHardLimitsRunFlatOutWhateverTheOrigin) {
  ModelCache m;
  m.reading.origin_busy = true;
  m.reading.dirty_lines = 5000;  // past the low watermark
  EXPECT_EQ(m.Tick(0), 5000u - 4000u + 64u);  // back under it in one go (the rate trickles)
  EXPECT_EQ(m.controller.state(), WritebackController::State::kFlatOut);
  // Under the reserve: the low watermark at 100 %, so only the reserve acts.
  ModelCache r;
  r.reading.flat_out_lines = kCapacity;
  r.reading.dirty_lines = kCapacity - 50;  // 50 clean or free lines, 200 wanted
  EXPECT_GE(r.Tick(0), 150u + 64u);  // at least; the rate may allow more
  EXPECT_EQ(r.controller.state(), WritebackController::State::kFlatOut);
}

TEST(WritebackControllerTest, CleansInBatchesNotLineByLine) {
  // A slow rate: 1 % over the target gives 25 lines a second; the cleaner
  // waits for a batch's worth or a second, never passes of one line.
  ModelCache m;
  m.reading.dirty_lines = 1100;
  uint64_t passes = 0, smallest = UINT64_MAX;
  for (int i = 0; i < 50; ++i) {
    const uint64_t n = m.Tick(0);
    if (n == 0) continue;
    ++passes;
    smallest = std::min(smallest, n);
  }
  EXPECT_GE(passes, 1u);
  EXPECT_LE(passes, 3u);  // a batch, then the rest after five seconds
  EXPECT_GE(smallest, 10u);
  // A steady line a second at the target: a pass every five seconds.
  ModelCache steady;
  steady.reading.dirty_lines = 1000;
  passes = 0;
  smallest = UINT64_MAX;
  for (int i = 0; i < 600; ++i) {
    const uint64_t n = steady.Tick(i % 10 == 0 ? 1 : 0);
    if (n == 0) continue;
    ++passes;
    smallest = std::min(smallest, n);
  }
  EXPECT_LE(passes, 13u);
  EXPECT_GE(smallest, 4u);
}

}  // namespace
}  // namespace cachecore::testing
