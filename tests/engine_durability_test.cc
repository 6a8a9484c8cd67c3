// Targeted power-cut cases: each names the ordering rule it checks, for
// every way the devices can lose unsynced writes.
#include <gtest/gtest.h>

#include "support/stamped_rig.h"

namespace cachecore::testing {
namespace {

class DurabilityTest : public ::testing::TestWithParam<PowerCutMode> {
 protected:
  void SetUp() override {
    config_.line_size = 4096;
    config_.background_cleaner = false;
  }

  void Cut() {
    Status s = rig_.PowerCutAndReopen(config_, GetParam());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  StampedRig rig_;
  EngineConfig config_;
};

TEST_P(DurabilityTest, SyncedWriteBackDataSurvives) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(3, 1);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  rig_.WriteStamped(4, 2);  // not synced: may or may not survive
  Cut();
  EXPECT_EQ(rig_.ReadStamped(3), 1u);
  uint64_t b4 = rig_.ReadStamped(4);
  EXPECT_TRUE(b4 == 0 || b4 == 2) << b4;
}

TEST_P(DurabilityTest, FuaWriteSurvives) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(7, 5, /*fua=*/true);
  Cut();
  EXPECT_EQ(rig_.ReadStamped(7), 5u);
}

// Rewriting flushed dirty data in place: the record must announce it first,
// or new data under the old checksum reads as corruption after the cut.
TEST_P(DurabilityTest, OverwriteOfFlushedDirtyDataKeepsOldOrNew) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(2, 1);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  rig_.WriteStamped(2, 2);  // makes the block's record stable-dirty on rewrite
  ASSERT_TRUE(rig_.engine().Sync().ok());
  rig_.WriteStamped(2, 3);
  Cut();
  uint64_t got = rig_.ReadStamped(2);
  EXPECT_TRUE(got == 2 || got == 3) << got;
}

// The same with a 64 KiB line, where a write to a neighbouring block
// rewrites the line's record and records the first block as flushed dirty.
TEST_P(DurabilityTest, OverwriteAfterNeighbourRewroteTheRecord) {
  config_.mode = CacheMode::kWriteBack;
  config_.line_size = 65536;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(0, 1);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  rig_.WriteStamped(1, 2);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  rig_.WriteStamped(0, 3);
  Cut();
  uint64_t got = rig_.ReadStamped(0);
  EXPECT_TRUE(got == 1 || got == 3) << got;
  EXPECT_EQ(rig_.ReadStamped(1), 2u);
}

// A write-back write over a clean cached block: after the cut the block is
// the old clean data or the new write, whichever device kept what.
TEST_P(DurabilityTest, WriteBackOverCleanBlock) {
  config_.mode = CacheMode::kWriteThrough;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(9, 1);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteBack).ok());
  config_.mode = CacheMode::kWriteBack;
  rig_.WriteStamped(9, 2);
  Cut();
  uint64_t got = rig_.ReadStamped(9);
  EXPECT_TRUE(got == 1 || got == 2) << got;
}

// The cleaner has made the origin's copy of a write-back write over a clean
// block durable, and the power goes before the block is marked clean. The
// block may read as either write afterwards, but it must read the same once
// the cache is gone: the cache may not keep serving the older
// data under the older, stable record while the origin holds the newer.
TEST_P(DurabilityTest, CutAfterTheCleanerWroteTheOriginStaysConsistent) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(9, 1);
  ASSERT_TRUE(rig_.engine().Flush().ok());  // cleaned: a durable, stable kClean record
  rig_.WriteStamped(9, 2);  // dirty, nothing synced
  OnStepOnce("flush-2-origin-synced", [&] { rig_.Freeze(); });
  EXPECT_FALSE(rig_.engine().Flush().ok());  // the power went at that step
  ClearStepAction();
  Cut();
  uint64_t first = rig_.ReadStamped(9);
  EXPECT_TRUE(first == 1 || first == 2) << first;
  EXPECT_EQ(rig_.OriginStampedAfterDetach(9), first);
}

// Write-through: an unsynced write may vanish, but what the cache serves
// after the cut must agree with what the origin will serve once the line
// is gone (no going back in time after an eviction or a detach).
TEST_P(DurabilityTest, WriteThroughStaysConsistentAcrossEviction) {
  config_.mode = CacheMode::kWriteThrough;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(1, 1);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  rig_.WriteStamped(1, 2);
  Cut();
  uint64_t first = rig_.ReadStamped(1);
  EXPECT_TRUE(first == 1 || first == 2) << first;
  EXPECT_EQ(rig_.OriginStampedAfterDetach(1), first);
}

TEST_P(DurabilityTest, CleanedDataSurvivesSlotReuse) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  for (uint64_t b = 0; b < 300; ++b) rig_.WriteStamped(b, b + 1);  // more than the cache holds
  ASSERT_TRUE(rig_.engine().Sync().ok());
  for (uint64_t b = 300; b < 600; ++b) rig_.WriteStamped(b, b + 1);
  Cut();
  for (uint64_t b = 0; b < 300; ++b) ASSERT_EQ(rig_.ReadStamped(b), b + 1) << "block " << b;
  for (uint64_t b = 300; b < 600; ++b) {
    uint64_t got = rig_.ReadStamped(b);
    ASSERT_TRUE(got == 0 || got == b + 1) << "block " << b << " holds " << got;
  }
}

INSTANTIATE_TEST_SUITE_P(PowerCutModes, DurabilityTest,
                         ::testing::Values(PowerCutMode::kDropUnsynced, PowerCutMode::kTear,
                                           PowerCutMode::kKeepUnsynced),
                         [](const auto& info) { return PowerCutModeName(info.param); });

}  // namespace
}  // namespace cachecore::testing
