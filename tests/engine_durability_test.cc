// Targeted power-cut cases: each names the ordering rule it checks, for
// every way the devices can lose unsynced writes.
#include <gtest/gtest.h>

#include <cstring>

#include "cachecore/steps.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kBlock = 4096;

// The power goes at a named step of the engine's own (see steps.h).
EngineRig* frozen_rig = nullptr;
const char* freeze_step = nullptr;
void FreezeAtStep(const char* step) {
  if (frozen_rig != nullptr && std::strcmp(step, freeze_step) == 0) frozen_rig->Freeze();
}

class DurabilityTest : public ::testing::TestWithParam<PowerCutMode> {
 protected:
  void SetUp() override {
    config_.line_size = 4096;
    config_.background_cleaner = false;
  }

  void WriteStamped(uint64_t block, uint64_t id, bool fua = false) {
    AlignedBuffer buf(kBlock);
    for (uint64_t s = 0; s < 8; ++s) StampSector(buf.data() + s * 512, id, block * 8 + s);
    Status st = rig_.engine().Write(block * kBlock, buf.data(), kBlock, fua);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  // The id every sector of the block holds; fails on a mixed or foreign block.
  uint64_t ReadStamped(uint64_t block) {
    AlignedBuffer buf(kBlock);
    Status st = rig_.engine().Read(block * kBlock, buf.data(), kBlock);
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::optional<uint64_t> first = ReadStamp(buf.data(), block * 8);
    EXPECT_TRUE(first.has_value()) << "block " << block << " holds foreign data";
    for (uint64_t s = 1; s < 8 && first; ++s) {
      EXPECT_EQ(ReadStamp(buf.data() + s * 512, block * 8 + s), first) << "torn block " << block;
    }
    return first.value_or(UINT64_MAX);
  }

  // Detaches the cache, then the id the origin alone holds for the block:
  // what the block reads as once the cache is gone.
  uint64_t OriginStampedAfterDetach(uint64_t block) {
    Status st = rig_.engine().Detach();
    EXPECT_TRUE(st.ok()) << st.ToString();
    AlignedBuffer buf(kBlock);
    st = rig_.origin().Read(block * kBlock, buf.data(), kBlock);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return ReadStamp(buf.data(), block * 8).value_or(UINT64_MAX);
  }

  void Cut() {
    Status s = rig_.PowerCutAndReopen(config_, GetParam());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  EngineRig rig_;
  EngineConfig config_;
};

TEST_P(DurabilityTest, SyncedWriteBackDataSurvives) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  WriteStamped(3, 1);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  WriteStamped(4, 2);  // not synced: may or may not survive
  Cut();
  EXPECT_EQ(ReadStamped(3), 1u);
  uint64_t b4 = ReadStamped(4);
  EXPECT_TRUE(b4 == 0 || b4 == 2) << b4;
}

TEST_P(DurabilityTest, FuaWriteSurvives) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  WriteStamped(7, 5, /*fua=*/true);
  Cut();
  EXPECT_EQ(ReadStamped(7), 5u);
}

// Rewriting flushed dirty data in place: the record must announce it first,
// or new data under the old checksum reads as corruption after the cut.
TEST_P(DurabilityTest, OverwriteOfFlushedDirtyDataKeepsOldOrNew) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  WriteStamped(2, 1);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  WriteStamped(2, 2);  // makes the block's record stable-dirty on rewrite
  ASSERT_TRUE(rig_.engine().Sync().ok());
  WriteStamped(2, 3);
  Cut();
  uint64_t got = ReadStamped(2);
  EXPECT_TRUE(got == 2 || got == 3) << got;
}

// The same with a 64 KiB line, where a write to a neighbouring block
// rewrites the line's record and records the first block as flushed dirty.
TEST_P(DurabilityTest, OverwriteAfterNeighbourRewroteTheRecord) {
  config_.mode = CacheMode::kWriteBack;
  config_.line_size = 65536;
  ASSERT_TRUE(rig_.Create(config_).ok());
  WriteStamped(0, 1);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  WriteStamped(1, 2);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  WriteStamped(0, 3);
  Cut();
  uint64_t got = ReadStamped(0);
  EXPECT_TRUE(got == 1 || got == 3) << got;
  EXPECT_EQ(ReadStamped(1), 2u);
}

// A write-back write over a clean cached block: after the cut the block is
// the old clean data or the new write, whichever device kept what.
TEST_P(DurabilityTest, WriteBackOverCleanBlock) {
  config_.mode = CacheMode::kWriteThrough;
  ASSERT_TRUE(rig_.Create(config_).ok());
  WriteStamped(9, 1);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteBack).ok());
  config_.mode = CacheMode::kWriteBack;
  WriteStamped(9, 2);
  Cut();
  uint64_t got = ReadStamped(9);
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
  WriteStamped(9, 1);
  ASSERT_TRUE(rig_.engine().Flush().ok());  // cleaned: a durable, stable kClean record
  WriteStamped(9, 2);  // dirty, nothing synced
  frozen_rig = &rig_;
  freeze_step = "flush-2-origin-synced";
  SetStepObserver(FreezeAtStep);
  EXPECT_FALSE(rig_.engine().Flush().ok());  // the power went at that step
  SetStepObserver(nullptr);
  frozen_rig = nullptr;
  Cut();
  uint64_t first = ReadStamped(9);
  EXPECT_TRUE(first == 1 || first == 2) << first;
  EXPECT_EQ(OriginStampedAfterDetach(9), first);
}

// Write-through: an unsynced write may vanish, but what the cache serves
// after the cut must agree with what the origin will serve once the line
// is gone (no going back in time after an eviction or a detach).
TEST_P(DurabilityTest, WriteThroughStaysConsistentAcrossEviction) {
  config_.mode = CacheMode::kWriteThrough;
  ASSERT_TRUE(rig_.Create(config_).ok());
  WriteStamped(1, 1);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  WriteStamped(1, 2);
  Cut();
  uint64_t first = ReadStamped(1);
  EXPECT_TRUE(first == 1 || first == 2) << first;
  EXPECT_EQ(OriginStampedAfterDetach(1), first);
}

TEST_P(DurabilityTest, CleanedDataSurvivesSlotReuse) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  for (uint64_t b = 0; b < 300; ++b) WriteStamped(b, b + 1);  // more than the cache holds
  ASSERT_TRUE(rig_.engine().Sync().ok());
  for (uint64_t b = 300; b < 600; ++b) WriteStamped(b, b + 1);
  Cut();
  for (uint64_t b = 0; b < 300; ++b) ASSERT_EQ(ReadStamped(b), b + 1) << "block " << b;
  for (uint64_t b = 300; b < 600; ++b) {
    uint64_t got = ReadStamped(b);
    ASSERT_TRUE(got == 0 || got == b + 1) << "block " << b << " holds " << got;
  }
}

INSTANTIATE_TEST_SUITE_P(PowerCutModes, DurabilityTest,
                         ::testing::Values(PowerCutMode::kDropUnsynced, PowerCutMode::kTear,
                                           PowerCutMode::kKeepUnsynced),
                         [](const auto& info) {
                           switch (info.param) {
                             case PowerCutMode::kDropUnsynced: return std::string("Drop");
                             case PowerCutMode::kTear: return std::string("Tear");
                             default: return std::string("Keep");
                           }
                         });

}  // namespace
}  // namespace cachecore::testing
