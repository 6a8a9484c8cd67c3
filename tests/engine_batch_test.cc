// Requests over several lines go out as batches (the reactor paths: all
// cached runs in one batch of cache reads, missing runs as one origin read
// each, a write-back write's lines in one batch): what a client relies on
// is that they read and write exactly what line-by-line requests would, including when a device fails mid-batch and
// when the cache is full of dirty lines.
#include <gtest/gtest.h>

#include <algorithm>

#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t K = 1024;

class EngineBatchTest : public ::testing::Test {
 protected:
  EngineBatchTest() : rig_(Options()) {}
  static RigOptions Options() {
    RigOptions o;
    o.volatile_caches = false;
    o.cache_data_size = 256 * K;  // 64 lines of 4 KiB
    return o;
  }
  void Create(CacheMode mode) {
    config_.mode = mode;
    config_.line_size = 4096;
    config_.sequential_cutoff = 0;
    config_.background_cleaner = false;
    ASSERT_TRUE(rig_.Create(config_).ok());
  }
  EngineRig rig_;
  EngineConfig config_;
};

// A miss over 16 lines is one origin read, not 16 (the second would fail).
TEST_F(EngineBatchTest, AMissRunAcrossLinesIsOneOriginRead) {
  Create(CacheMode::kWriteThrough);
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteAround).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 64 * K, 1).ok());  // on the origin only
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteThrough).ok());
  rig_.origin().FailNth(kFaultRead, 2);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 64 * K, 1));
  EXPECT_EQ(rig_.origin().injected_failures(), 0u);
  rig_.origin().ClearFaults();
  StatsSnapshot st = rig_.engine().stats();
  EXPECT_EQ(st.read_misses, 16u);
  EXPECT_EQ(st.occupancy_lines, 16u);  // promoted
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 64 * K, 1));
  EXPECT_EQ(rig_.engine().stats().read_hits, 16u);
}

// Cached and missing runs mixed: each from its own device, all correct.
TEST_F(EngineBatchTest, APartlyCachedReadTakesEachRunFromItsDevice) {
  Create(CacheMode::kWriteThrough);
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteAround).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 20 * K, 2).ok());
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteThrough).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 4 * K, 4 * K, 3).ok());   // line 1 cached
  ASSERT_TRUE(WritePattern(rig_.engine(), 12 * K, 4 * K, 3).ok());  // line 3 cached
  AlignedBuffer got(20 * K), want(20 * K);
  ASSERT_TRUE(rig_.engine().Read(0, got.data(), 20 * K).ok());
  FillPattern(want.data(), 0, 20 * K, 2);
  FillPattern(want.data() + 4 * K, 4 * K, 4 * K, 3);
  FillPattern(want.data() + 12 * K, 12 * K, 4 * K, 3);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), 20 * K), 0);
  StatsSnapshot st = rig_.engine().stats();
  EXPECT_EQ(st.read_hits, 2u);
  EXPECT_EQ(st.read_misses, 3u);
  EXPECT_EQ(st.read_requests_partial_hit, 1u);
  EXPECT_EQ(st.occupancy_lines, 5u);
}

TEST_F(EngineBatchTest, AnOriginErrorFailsTheReadAndCachesNothing) {
  Create(CacheMode::kWriteThrough);
  rig_.origin().FailNth(kFaultRead, 1);
  AlignedBuffer b(64 * K);
  EXPECT_EQ(rig_.engine().Read(0, b.data(), 64 * K).code(), StatusCode::kIoError);
  EXPECT_EQ(rig_.engine().stats().errors.origin_read, 1u);
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, 0u);
}

TEST_F(EngineBatchTest, AWriteBackWriteOverLinesIsDirtyAndSurvivesARestart) {
  Create(CacheMode::kWriteBack);
  ASSERT_TRUE(WritePattern(rig_.engine(), 8 * K, 64 * K, 4).ok());
  StatsSnapshot st = rig_.engine().stats();
  EXPECT_EQ(st.dirty_lines, 16u);
  EXPECT_EQ(st.write_misses, 16u);
  AlignedBuffer origin(64 * K);
  ASSERT_TRUE(rig_.raw_origin().Read(8 * K, origin.data(), 64 * K).ok());
  EXPECT_TRUE(std::all_of(origin.data(), origin.data() + 64 * K, [](uint8_t c) { return c == 0; }))
      << "write-back wrote to the origin before any flush";
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_TRUE(rig_.Restart(config_).ok());
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 16u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 8 * K, 64 * K, 4));
  ASSERT_TRUE(rig_.engine().Flush().ok());
  EXPECT_TRUE(rig_.OriginHasPattern(8 * K, 64 * K, 4));
}

// The third line's cache write fails: that line goes to the origin,
// durably, and leaves the cache; the others are dirty; nothing is lost.
TEST_F(EngineBatchTest, ACacheWriteErrorMidBatchSendsThatLineToTheOrigin) {
  Create(CacheMode::kWriteBack);
  // Odd lines cached first: no two neighbouring lines of the batch then sit
  // in neighbouring slots, and each line is a cache write of its own.
  for (uint64_t line = 1; line < 8; line += 2) ASSERT_TRUE(WritePattern(rig_.engine(), line * 4 * K, 4 * K, 4).ok());
  rig_.cache().FailNth(kFaultWrite, 3);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 32 * K, 5).ok());
  StatsSnapshot st = rig_.engine().stats();
  EXPECT_EQ(st.errors.cache_write, 1u);
  EXPECT_EQ(st.dirty_lines, 7u);
  EXPECT_EQ(st.occupancy_lines, 7u);
  EXPECT_TRUE(rig_.OriginHasPattern(8 * K, 4 * K, 5));
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 32 * K, 5));
  ASSERT_TRUE(rig_.engine().Flush().ok());
  EXPECT_TRUE(rig_.OriginHasPattern(0, 32 * K, 5));
}

// With every slot dirty, a batch's allocations clean victims first, and
// never take one of the batch's own lines.
// No line is cleaned for a request: a batch into a cache full of dirty lines
// goes around it, and everything lands.
TEST_F(EngineBatchTest, ABatchIntoACacheFullOfDirtyLinesGoesAroundIt) {
  Create(CacheMode::kWriteBack);
  const uint64_t capacity = rig_.engine().stats().capacity_lines;
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, capacity * 4 * K, 6).ok());
  ASSERT_EQ(rig_.engine().stats().dirty_lines, capacity);
  for (uint64_t round = 0; round < 4; ++round) {
    uint64_t at = (capacity + round * 48) * 4 * K;
    ASSERT_TRUE(WritePattern(rig_.engine(), at, 48 * 4 * K, 7).ok()) << round;
    EXPECT_TRUE(HasPattern(rig_.engine(), at, 48 * 4 * K, 7)) << round;
  }
  EXPECT_EQ(rig_.engine().stats().evictions, 0u);
  EXPECT_EQ(rig_.engine().stats().cleaner_writes, 0u);
  EXPECT_EQ(rig_.engine().stats().bypassed_no_space, 2 * 4 * 48u);  // the writes, then the reads of them
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, capacity * 4 * K, 6));
  ASSERT_TRUE(rig_.engine().Flush().ok());
  EXPECT_TRUE(rig_.OriginHasPattern(0, capacity * 4 * K, 6));
  EXPECT_TRUE(rig_.OriginHasPattern(capacity * 4 * K, 4 * 48 * 4 * K, 7));
}

// A write as large as the cache: some lines cannot get a slot (every other
// one is the batch's own) and go to the origin; all of it reads back.
TEST_F(EngineBatchTest, AWriteLargerThanTheCacheLandsWhole) {
  Create(CacheMode::kWriteBack);
  const uint64_t capacity = rig_.engine().stats().capacity_lines;
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 2 * capacity * 4 * K, 8).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 2 * capacity * 4 * K, 8));
  ASSERT_TRUE(rig_.engine().Flush().ok());
  EXPECT_TRUE(rig_.OriginHasPattern(0, 2 * capacity * 4 * K, 8));
}

// After a clean shutdown the records of blocks written since the last
// flush are taken as recorded, not read back one by one at start. A block
// damaged while the cache was stopped is then found when it is read (a
// dirty block that fails its checksum: an error, never other data), not
// dropped at start in favour of the origin's older copy.
TEST_F(EngineBatchTest, ACleanRestartTrustsWhatItSynced) {
  Create(CacheMode::kWriteBack);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 64 * K, 9).ok());  // fresh records, 16 lines
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  AlignedBuffer junk(4 * K);
  std::memset(junk.data(), 0xA5, 4 * K);
  ASSERT_TRUE(rig_.raw_cache().Write(kDataOffset, junk.data(), 4 * K).ok());  // slot 0: line 0
  ASSERT_TRUE(rig_.Restart(config_).ok());
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 16u);
  AlignedBuffer b(4 * K);
  EXPECT_EQ(rig_.engine().Read(0, b.data(), 4 * K).code(), StatusCode::kIoError);
  EXPECT_TRUE(HasPattern(rig_.engine(), 4 * K, 60 * K, 9));
}

}  // namespace
}  // namespace cachecore::testing
