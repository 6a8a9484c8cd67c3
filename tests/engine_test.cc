// Engine behaviour a user relies on, mode by mode: what is cached, what is
// counted, partial lines, sequential cutoff, n-hit admission, discard,
// warm restart and detach.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "cachecore/metadata/check.h"
#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t K = 1024;

EngineConfig Config(CacheMode mode, uint32_t line = 4096) {
  EngineConfig c;
  c.mode = mode;
  c.line_size = line;
  c.sequential_cutoff = 0;
  c.background_cleaner = false;
  return c;
}

TEST(EngineTest, WriteThroughKeepsOriginCurrentAndCachesReads) {
  EngineRig rig;
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteThrough)).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 64 * K, 1).ok());
  // The origin has it at once (through the device's own cache).
  AlignedBuffer b(64 * K), want(64 * K);
  ASSERT_TRUE(rig.origin().Read(0, b.data(), 64 * K).ok());
  FillPattern(want.data(), 0, 64 * K, 1);
  EXPECT_EQ(std::memcmp(b.data(), want.data(), 64 * K), 0);
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 64 * K, 1));
  StatsSnapshot s = rig.engine().stats();
  EXPECT_EQ(s.read_hits, 16u);  // written through and allocated: all hits
  EXPECT_EQ(s.dirty_lines, 0u);
  EXPECT_EQ(s.occupancy_lines, 16u);
}

TEST(EngineTest, ReadMissThenHit) {
  EngineRig rig;
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteThrough)).ok());
  AlignedBuffer b(8 * K);
  ASSERT_TRUE(rig.engine().Read(1 << 20, b.data(), 8 * K).ok());
  ASSERT_TRUE(rig.engine().Read(1 << 20, b.data(), 8 * K).ok());
  ASSERT_TRUE(rig.engine().Read((1 << 20) + 4 * K, b.data(), 8 * K).ok());
  StatsSnapshot s = rig.engine().stats();
  EXPECT_EQ(s.read_misses, 3u);
  EXPECT_EQ(s.read_hits, 3u);
  EXPECT_EQ(s.read_requests_miss, 1u);
  EXPECT_EQ(s.read_requests_full_hit, 1u);
  EXPECT_EQ(s.read_requests_partial_hit, 1u);
  EXPECT_NEAR(s.read_hit_ratio(), 0.5, 1e-9);
  EXPECT_EQ(s.promotions, 3u);
}

TEST(EngineTest, WriteBackKeepsDataOnCacheUntilFlush) {
  EngineRig rig;
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteBack)).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 8 * K, 16 * K, 2).ok());
  AlignedBuffer b(16 * K);
  ASSERT_TRUE(rig.origin().Read(8 * K, b.data(), 16 * K).ok());
  EXPECT_TRUE(std::all_of(b.data(), b.data() + 16 * K, [](uint8_t c) { return c == 0; }));
  EXPECT_EQ(rig.engine().stats().dirty_lines, 4u);
  std::vector<uint64_t> progress;
  ASSERT_TRUE(rig.engine().Flush([&](uint64_t left, uint64_t) { progress.push_back(left); }).ok());
  EXPECT_EQ(progress.front(), 4u);
  EXPECT_EQ(progress.back(), 0u);
  EXPECT_EQ(rig.engine().stats().dirty_lines, 0u);
  EXPECT_GE(rig.engine().stats().cleaner_writes, 1u);
  ASSERT_TRUE(rig.origin().Read(8 * K, b.data(), 16 * K).ok());
  AlignedBuffer want(16 * K);
  FillPattern(want.data(), 8 * K, 16 * K, 2);
  EXPECT_EQ(std::memcmp(b.data(), want.data(), 16 * K), 0);
}

TEST(EngineTest, CleanerCoalescesAdjacentLinesIntoOneWrite) {
  EngineRig rig;
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteBack)).ok());
  for (uint64_t i = 0; i < 32; ++i) ASSERT_TRUE(WritePattern(rig.engine(), i * 4 * K, 4 * K, 3).ok());
  ASSERT_TRUE(rig.engine().Flush().ok());
  EXPECT_EQ(rig.engine().stats().cleaner_writes, 1u);  // 32 lines, one origin write
  EXPECT_EQ(rig.engine().stats().cleaned_blocks, 32u);
}

TEST(EngineTest, BackgroundCleanerKeepsDirtyLinesBetweenWatermarks) {
  EngineRig rig;  // 256 lines
  EngineConfig c = Config(CacheMode::kWriteBack);
  c.background_cleaner = true;
  c.dirty_high_pct = 50;
  c.dirty_low_pct = 20;
  c.cleaner_batch_lines = 16;
  ASSERT_TRUE(rig.Create(c).ok());
  for (uint64_t i = 0; i < 200; ++i) ASSERT_TRUE(WritePattern(rig.engine(), i * 4 * K, 4 * K, 1).ok());
  uint64_t dirty = 200;
  for (int i = 0; i < 400 && dirty > 51; ++i) {  // up to 20 s: a slow machine
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    dirty = rig.engine().stats().dirty_lines;
  }
  EXPECT_LE(dirty, 51u);  // below the low watermark (20 % of 256)
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_GT(rig.engine().stats().dirty_lines, 0u);  // and it stopped there: the rest stays cached dirty
  for (uint64_t i = 0; i < 200; ++i) ASSERT_TRUE(HasPattern(rig.engine(), i * 4 * K, 4 * K, 1));
}

TEST(EngineTest, ReadOnlyNeverAllocatesOnWriteAndDropsStaleCopies) {
  EngineRig rig;
  ASSERT_TRUE(rig.Create(Config(CacheMode::kReadOnly)).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 16 * K, 4).ok());
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 0u);
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 16 * K, 4));  // read allocates
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 4u);
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 16 * K, 5).ok());
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 0u);
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 16 * K, 5));
}

TEST(EngineTest, WriteAroundUpdatesHitsButDoesNotAllocate) {
  EngineRig rig;
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteAround)).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 8 * K, 1).ok());
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 0u);
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 8 * K, 1));
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 8 * K, 2).ok());
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 2u);
  rig.engine().ResetStats();
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 8 * K, 2));
  EXPECT_EQ(rig.engine().stats().read_hits, 2u);
}

TEST(EngineTest, PassThroughUsesNoCache) {
  EngineRig rig;
  ASSERT_TRUE(rig.Create(Config(CacheMode::kPassThrough)).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 8 * K, 1).ok());
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 8 * K, 1));
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 8 * K, 1));
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 0u);
  EXPECT_EQ(rig.engine().stats().read_hits, 0u);
}

TEST(EngineTest, PartialLinesAndSectorWritesMergeCorrectly) {
  for (CacheMode mode : {CacheMode::kWriteThrough, CacheMode::kWriteBack, CacheMode::kWriteAround,
                         CacheMode::kReadOnly, CacheMode::kPassThrough}) {
    SCOPED_TRACE(CacheModeName(mode));
    EngineRig rig;
    ASSERT_TRUE(rig.Create(Config(mode, 64 * K)).ok());
    ASSERT_TRUE(WritePattern(rig.engine(), 0, 256 * K, 1).ok());
    // 512-byte writes inside blocks, across a line boundary, unaligned runs.
    ASSERT_TRUE(WritePattern(rig.engine(), 512, 512, 2).ok());
    ASSERT_TRUE(WritePattern(rig.engine(), 64 * K - 1536, 3584, 3).ok());
    ASSERT_TRUE(WritePattern(rig.engine(), 130 * K + 512, 70 * K, 4).ok());
    for (int pass = 0; pass < 2; ++pass) {  // second pass: from the cache
      EXPECT_TRUE(HasPattern(rig.engine(), 0, 512, 1));
      EXPECT_TRUE(HasPattern(rig.engine(), 512, 512, 2));
      EXPECT_TRUE(HasPattern(rig.engine(), 1024, 64 * K - 2560, 1));
      EXPECT_TRUE(HasPattern(rig.engine(), 64 * K - 1536, 3584, 3));
      EXPECT_TRUE(HasPattern(rig.engine(), 66 * K, 64 * K, 1));
      EXPECT_TRUE(HasPattern(rig.engine(), 130 * K, 512, 1));
      EXPECT_TRUE(HasPattern(rig.engine(), 130 * K + 512, 70 * K, 4));
      EXPECT_TRUE(HasPattern(rig.engine(), 200 * K + 512, 56 * K - 512, 1));
    }
    ASSERT_TRUE(rig.engine().Detach().ok());
  }
}

TEST(EngineTest, RefusesBadRequests) {
  EngineRig rig;
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteThrough)).ok());
  AlignedBuffer b(8 * K);
  EXPECT_EQ(rig.engine().Read(100, b.data(), 512).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rig.engine().Write(0, b.data(), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rig.engine().Read(8 << 20, b.data(), 512).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(rig.engine().Write((8 << 20) - 512, b.data(), 1024).code(), StatusCode::kOutOfRange);
}

TEST(EngineTest, SequentialStreamBypassesAfterCutoff) {
  EngineRig rig;
  EngineConfig c = Config(CacheMode::kWriteThrough);
  c.sequential_cutoff = 64 * K;
  ASSERT_TRUE(rig.Create(c).ok());
  AlignedBuffer b(16 * K);
  for (uint64_t off = 0; off < 256 * K; off += 16 * K) ASSERT_TRUE(rig.engine().Read(off, b.data(), 16 * K).ok());
  StatsSnapshot s = rig.engine().stats();
  EXPECT_EQ(s.occupancy_lines, 12u);  // the first 48 KiB were admitted
  EXPECT_EQ(s.bypassed, 13u);
  // A random read elsewhere is still cached.
  ASSERT_TRUE(rig.engine().Read(4 << 20, b.data(), 4 * K).ok());
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 13u);
  ASSERT_TRUE(rig.engine().SetSequentialCutoff(0).ok());
  ASSERT_TRUE(rig.engine().Read(6 << 20, b.data(), 16 * K).ok());
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 17u);
}

TEST(EngineTest, NHitFilterAdmitsOnSecondMiss) {
  EngineRig rig;
  EngineConfig c = Config(CacheMode::kWriteThrough);
  c.admit_after_misses = 2;
  ASSERT_TRUE(rig.Create(c).ok());
  AlignedBuffer b(4 * K);
  ASSERT_TRUE(rig.engine().Read(0, b.data(), 4 * K).ok());
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 0u);
  ASSERT_TRUE(rig.engine().Read(0, b.data(), 4 * K).ok());
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 1u);
}

// Writes into a cache full of dirty lines go around it to the origin: no
// line is cleaned for a request (that cost an origin write and flush per
// request before), and every write reads back.
TEST(EngineTest, WritesIntoACacheFullOfDirtyLinesGoAroundIt) {
  EngineRig rig;  // 256 lines of 4 KiB
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteBack)).ok());
  for (uint64_t i = 0; i < 1024; ++i) ASSERT_TRUE(WritePattern(rig.engine(), i * 4 * K, 4 * K, 7).ok());
  StatsSnapshot s = rig.engine().stats();
  EXPECT_EQ(s.occupancy_lines, 256u);
  EXPECT_EQ(s.dirty_lines, 256u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.cleaner_writes, 0u);
  EXPECT_EQ(s.bypassed_no_space, 768u);
  for (uint64_t i = 0; i < 1024; ++i) ASSERT_TRUE(HasPattern(rig.engine(), i * 4 * K, 4 * K, 7)) << i;
}

// A read miss in a cache whose every line is dirty is served from the
// origin without any origin write, and not promoted.
TEST(EngineTest, ReadMissesInACacheFullOfDirtyLinesWriteNothingToTheOrigin) {
  EngineRig rig;  // 256 lines of 4 KiB
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteBack)).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 256 * 4 * K, 7).ok());
  AlignedBuffer rest(256 * 4 * K);
  FillPattern(rest.data(), 256 * 4 * K, rest.size(), 8);
  ASSERT_TRUE(rig.raw_origin().Write(256 * 4 * K, rest.data(), rest.size()).ok());
  const uint64_t origin_writes = rig.origin().operations(kFaultWrite | kFaultFlush);
  EXPECT_TRUE(HasPattern(rig.engine(), 256 * 4 * K, 64 * 4 * K, 8));  // one request of 64 lines
  for (uint64_t i = 320; i < 512; ++i) EXPECT_TRUE(HasPattern(rig.engine(), i * 4 * K, 4 * K, 8)) << i;
  EXPECT_EQ(rig.origin().operations(kFaultWrite | kFaultFlush), origin_writes);
  const StatsSnapshot s = rig.engine().stats();
  EXPECT_EQ(s.dirty_lines, 256u);
  EXPECT_EQ(s.read_misses, 256u);
  EXPECT_EQ(s.bypassed_no_space, 256u);
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 256 * 4 * K, 7));
}

TEST(EngineTest, DiscardDropsCachedLines) {
  EngineRig rig;
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteBack)).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 32 * K, 1).ok());
  ASSERT_TRUE(rig.engine().Discard(0, 16 * K).ok());
  StatsSnapshot s = rig.engine().stats();
  EXPECT_EQ(s.occupancy_lines, 4u);
  EXPECT_EQ(s.dirty_lines, 4u);
  EXPECT_TRUE(HasPattern(rig.engine(), 16 * K, 16 * K, 1));
  AlignedBuffer b(16 * K);
  ASSERT_TRUE(rig.engine().Read(0, b.data(), 16 * K).ok());
  EXPECT_TRUE(std::all_of(b.data(), b.data() + 16 * K, [](uint8_t c) { return c == 0; }));
}

TEST(EngineTest, PartialDiscardDropsCleanBlocksAndKeepsDirtyOnes) {
  EngineRig rig;
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteThrough)).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 8 * K, 1).ok());
  ASSERT_TRUE(rig.engine().Discard(512, 4 * K).ok());  // part of each of two blocks
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 0u);
  // What is read now comes from the origin, which discarded the same range.
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 512, 1));
  EXPECT_TRUE(HasPattern(rig.engine(), 4 * K + 512, 4 * K - 512, 1));
  ASSERT_TRUE(rig.engine().SetMode(CacheMode::kWriteBack).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 16 * K, 4 * K, 2).ok());
  ASSERT_TRUE(rig.engine().Discard(16 * K, 2 * K).ok());
  EXPECT_EQ(rig.engine().stats().dirty_lines, 1u);
  EXPECT_TRUE(HasPattern(rig.engine(), 18 * K, 2 * K, 2));
}

TEST(EngineTest, WarmAfterCleanRestart) {
  EngineRig rig;
  EngineConfig c = Config(CacheMode::kWriteBack, 64 * K);
  ASSERT_TRUE(rig.Create(c).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 512 * K, 9).ok());
  ASSERT_TRUE(rig.Restart(c).ok());
  StatsSnapshot s = rig.engine().stats();
  EXPECT_EQ(s.occupancy_lines, 8u);
  EXPECT_EQ(s.dirty_lines, 8u);
  EXPECT_EQ(rig.engine().mode(), CacheMode::kWriteBack);  // from the store
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 512 * K, 9));
  EXPECT_EQ(rig.engine().stats().read_hits, 128u);
  EXPECT_EQ(rig.engine().stats().read_misses, 0u);
}

// An origin that is not a whole number of lines: its last line is cut
// short, and is cached, restarted and checked like any other.
TEST(EngineTest, ShortLastLineStaysWarmAndChecksClean) {
  RigOptions ro;
  ro.origin_size = (8 << 20) + 4 * K;
  EngineRig rig(ro);
  EngineConfig c = Config(CacheMode::kWriteBack, 64 * K);
  ASSERT_TRUE(rig.Create(c).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 8 << 20, 4 * K, 4).ok());
  Status restarted = rig.Restart(c);
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  EXPECT_EQ(rig.engine().stats().dirty_lines, 1u);
  EXPECT_TRUE(HasPattern(rig.engine(), 8 << 20, 4 * K, 4));
  ASSERT_TRUE(rig.engine().Shutdown().ok());
  Result<CheckReport> report = CheckCache(&rig.origin(), &rig.cache(), &rig.store());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->problems.empty()) << report->problems.front();
  EXPECT_EQ(report->dirty_lines, 1u);
}

TEST(EngineTest, WarmAfterCrash) {
  EngineRig rig;
  EngineConfig c = Config(CacheMode::kWriteThrough, 64 * K);
  ASSERT_TRUE(rig.Create(c).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 512 * K, 9).ok());
  ASSERT_TRUE(rig.engine().Sync().ok());
  ASSERT_TRUE(rig.PowerCutAndReopen(c, PowerCutMode::kDropUnsynced).ok());
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 8u);
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 512 * K, 9));
  EXPECT_EQ(rig.engine().stats().read_hits, 128u);
}

TEST(EngineTest, ModeSwitchFromWriteBackCleansFirst) {
  EngineRig rig;
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteBack)).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 64 * K, 1).ok());
  uint64_t calls = 0;
  ASSERT_TRUE(rig.engine().SetMode(CacheMode::kWriteThrough, [&](uint64_t, uint64_t) { ++calls; }).ok());
  EXPECT_GT(calls, 0u);
  EXPECT_EQ(rig.engine().stats().dirty_lines, 0u);
  EXPECT_EQ(rig.engine().mode(), CacheMode::kWriteThrough);
}

TEST(EngineTest, DetachLeavesEverythingOnTheOrigin) {
  EngineRig rig;
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteBack)).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 1 << 20, 3).ok());
  ASSERT_TRUE(rig.engine().Detach().ok());
  AlignedBuffer got(1 << 20), want(1 << 20);
  ASSERT_TRUE(rig.raw_origin().Read(0, got.data(), 1 << 20).ok());  // the medium itself
  FillPattern(want.data(), 0, 1 << 20, 3);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), 1 << 20), 0);
  AlignedBuffer b(4096);
  EXPECT_EQ(rig.engine().Read(0, b.data(), 4096).code(), StatusCode::kBusy);
}

}  // namespace
}  // namespace cachecore::testing
