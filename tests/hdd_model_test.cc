// The emulated disk's timing model (scripts/bench/hdd_model.h): what a
// 7,200 rpm disk does, as properties of the model, not of a stopwatch.
#include <gtest/gtest.h>

#include <random>

#include "hdd_model.h"

namespace bench {
namespace {

constexpr uint64_t kVolume = 8ull << 30;

TEST(HddModelTest, StreamingCostsOnlyTheTransfer) {
  HddModel m(kVolume);
  double t = 0;
  t += m.ServiceTime(0, 1 << 20, t);
  m.Served(0, 1 << 20);
  double next = m.ServiceTime(1 << 20, 1 << 20, t);
  EXPECT_NEAR(next, (1 << 20) / 210e6, 1e-9);  // 210 MB/s, no positioning
}

TEST(HddModelTest, RandomReadsAverageSeekPlusHalfARotation) {
  HddModel m(kVolume);
  std::mt19937_64 rng(1);
  double t = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    uint64_t at = (rng() % (kVolume / 4096)) * 4096;
    t += m.ServiceTime(at, 4096, t);
    m.Served(at, 4096);
  }
  double mean_ms = t / n * 1e3;
  // Random seeks over the whole stroke: a bit above the quoted 8.5 ms
  // average (that one is over a third of the stroke), plus 4.17 ms of
  // rotation: 75-90 IOPS at queue depth 1, as such disks measure.
  EXPECT_GT(mean_ms, 11.0);
  EXPECT_LT(mean_ms, 14.5);
}

TEST(HddModelTest, SeeksGrowWithDistance) {
  HddModel m(kVolume);
  EXPECT_EQ(m.SeekTime(0), 0);
  EXPECT_LT(m.SeekTime(kVolume / 100), m.SeekTime(kVolume / 10));
  EXPECT_LT(m.SeekTime(kVolume / 10), m.SeekTime(kVolume));
  EXPECT_NEAR(m.SeekTime(kVolume / 3), 8.5e-3, 1e-6);
}

}  // namespace
}  // namespace bench
