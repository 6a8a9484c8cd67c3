// stats --history's ring: what happened in each minute from the counters
// since start, the dirty level at its end, counter resets, a day kept.
#include "history.h"

#include <gtest/gtest.h>

namespace cachectl {
namespace {

HistoryMinute At(int64_t t, uint64_t read_hits, uint64_t dirty = 0) {
  HistoryMinute m;
  m.minute_start = t;
  m.read_hits = read_hits;
  m.read_misses = read_hits / 2;
  m.dirty_lines = dirty;
  m.cleaned_bytes = read_hits * 10;
  return m;
}

TEST(HistoryTest, EachMinuteKeepsItsGrowthAndTheDirtyLevel) {
  History h;
  h.Add(At(0, 100, 7));  // the base: nothing known of the minute before it
  EXPECT_TRUE(h.Minutes().empty());
  h.Add(At(60, 130, 5));
  h.Add(At(120, 130, 9));
  auto m = h.Minutes();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].minute_start, 0);  // the minute that began at the base
  EXPECT_EQ(m[0].read_hits, 30u);
  EXPECT_EQ(m[0].read_misses, 15u);
  EXPECT_EQ(m[0].cleaned_bytes, 300u);
  EXPECT_EQ(m[0].dirty_lines, 5u);  // a level, not a difference
  EXPECT_EQ(m[1].read_hits, 0u);
  EXPECT_EQ(m[1].dirty_lines, 9u);
}

TEST(HistoryTest, ACounterResetInTheMinuteCountsFromZero) {
  History h;
  h.Add(At(0, 500));
  h.Add(At(60, 20));  // stats --reset, then 20 hits
  ASSERT_EQ(h.Minutes().size(), 1u);
  EXPECT_EQ(h.Minutes()[0].read_hits, 20u);
}

TEST(HistoryTest, ADayIsKeptOldestFirst) {
  History h(3);
  for (int i = 0; i <= 5; ++i) h.Add(At(60 * i, 10 * i));
  auto m = h.Minutes();
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].minute_start, 120);
  EXPECT_EQ(m[1].minute_start, 180);
  EXPECT_EQ(m[2].minute_start, 240);
  EXPECT_EQ(History::kMinutesADay, 1440u);
}

}  // namespace
}  // namespace cachectl
