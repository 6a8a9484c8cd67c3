// Each error case of the design brief, asserting what the client reads
// afterwards and what the statistics say.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t K = 1024;

class EngineFaultTest : public ::testing::Test {
 protected:
  EngineFaultTest() : rig_(Options()) {}
  static RigOptions Options() {
    RigOptions o;
    o.volatile_caches = false;
    return o;
  }
  void Create(CacheMode mode, bool cleaner = false) {
    config_.mode = mode;
    config_.line_size = 4096;
    config_.sequential_cutoff = 0;
    config_.background_cleaner = cleaner;
    ASSERT_TRUE(rig_.Create(config_).ok());
  }
  // Overwrites the cached copy of slot 0 (the first line allocated).
  void CorruptSlotZero() {
    AlignedBuffer junk(4 * K);
    std::memset(junk.data(), 0xA5, 4 * K);
    ASSERT_TRUE(rig_.raw_cache().Write(kDataOffset, junk.data(), 4 * K).ok());
  }
  EngineRig rig_;
  EngineConfig config_;
};

TEST_F(EngineFaultTest, CacheReadErrorOnCleanHitReadsOrigin) {
  Create(CacheMode::kWriteThrough);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * K, 1).ok());
  rig_.cache().FailNth(kFaultRead, 1);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * K, 1));
  EXPECT_EQ(rig_.engine().stats().errors.cache_read, 1u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * K, 1));
}

TEST_F(EngineFaultTest, CacheReadErrorOnDirtyHitFailsOnlyThatRead) {
  Create(CacheMode::kWriteBack);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * K, 1).ok());
  rig_.cache().FailNth(kFaultRead, 1);
  AlignedBuffer b(4 * K);
  EXPECT_EQ(rig_.engine().Read(0, b.data(), 4 * K).code(), StatusCode::kIoError);
  EXPECT_EQ(rig_.engine().stats().errors.cache_read, 1u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * K, 1));  // the data is still there
}

TEST_F(EngineFaultTest, CacheWriteErrorInWriteBackWritesThrough) {
  Create(CacheMode::kWriteBack);
  rig_.cache().FailNth(kFaultWrite, 1);
  // Two writes: one request's adjacent lines may share one cache write.
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * K, 2).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 4 * K, 4 * K, 2).ok());
  // The line whose cache write failed went to the origin; the other is dirty.
  EXPECT_TRUE(rig_.OriginHasPattern(0, 4 * K, 2));
  EXPECT_EQ(rig_.engine().stats().errors.cache_write, 1u);
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 1u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 8 * K, 2));
}

TEST_F(EngineFaultTest, CacheWriteErrorOnPromotionStillReturnsData) {
  Create(CacheMode::kWriteThrough);
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteAround).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * K, 3).ok());
  rig_.cache().FailNth(kFaultWrite, 1);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * K, 3));
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, 0u);
  EXPECT_EQ(rig_.engine().stats().errors.cache_write, 1u);
}

TEST_F(EngineFaultTest, OriginErrorDuringCleaningKeepsDirtyDataAndRetries) {
  Create(CacheMode::kWriteBack);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 16 * K, 4).ok());
  rig_.origin().FailAlways(kFaultWrite);
  Status s = rig_.engine().Flush();
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 4u);
  EXPECT_GE(rig_.engine().stats().errors.origin_write, 1u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 16 * K, 4));
  rig_.origin().ClearFaults();
  ASSERT_TRUE(rig_.engine().Flush().ok());
  EXPECT_TRUE(rig_.OriginHasPattern(0, 16 * K, 4));
}

TEST_F(EngineFaultTest, OriginReadErrorIsReturned) {
  Create(CacheMode::kWriteThrough);
  rig_.origin().FailNth(kFaultRead, 1);
  AlignedBuffer b(4 * K);
  EXPECT_EQ(rig_.engine().Read(0, b.data(), 4 * K).code(), StatusCode::kIoError);
  EXPECT_EQ(rig_.engine().stats().errors.origin_read, 1u);
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, 0u);  // nothing half-cached
}

TEST_F(EngineFaultTest, OriginWriteErrorInWriteThroughKeepsCacheAndOriginAgreeing) {
  Create(CacheMode::kWriteThrough);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * K, 5).ok());
  rig_.origin().FailNth(kFaultWrite, 1);
  EXPECT_EQ(WritePattern(rig_.engine(), 0, 4 * K, 6).code(), StatusCode::kIoError);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * K, 5));  // what the origin holds
}

TEST_F(EngineFaultTest, ChecksumMismatchOnCleanBlockIsRepaired) {
  Create(CacheMode::kWriteThrough);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * K, 7).ok());
  CorruptSlotZero();
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * K, 7));
  EXPECT_EQ(rig_.engine().stats().errors.checksum_repaired, 1u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * K, 7));
  EXPECT_EQ(rig_.engine().stats().errors.checksum_repaired, 1u);  // repaired for good
  EXPECT_EQ(rig_.engine().stats().read_hits, 2u);
}

// A read over many lines, all cached, goes out as one batch; one block
// that fails its checksum sends the whole read down the line-by-line path,
// which repairs it from the origin.
TEST_F(EngineFaultTest, ABatchedReadWithOneBadBlockIsRepaired) {
  Create(CacheMode::kWriteThrough);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 64 * K, 5).ok());  // 16 lines of 4 KiB, cached
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 64 * K, 5));
  EXPECT_EQ(rig_.engine().stats().read_hits, 16u);
  CorruptSlotZero();
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 64 * K, 5));
  EXPECT_EQ(rig_.engine().stats().errors.checksum_repaired, 1u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 64 * K, 5));  // batched again, repaired copy
  EXPECT_EQ(rig_.engine().stats().errors.checksum_repaired, 1u);
}

TEST_F(EngineFaultTest, ChecksumMismatchOnDirtyBlockIsAnErrorNeverWrongData) {
  Create(CacheMode::kWriteBack);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * K, 8).ok());
  CorruptSlotZero();
  AlignedBuffer b(4 * K);
  EXPECT_EQ(rig_.engine().Read(0, b.data(), 4 * K).code(), StatusCode::kIoError);
  EXPECT_EQ(rig_.engine().stats().errors.checksum_failed, 1u);
  Status flush = rig_.engine().Flush();
  EXPECT_EQ(flush.code(), StatusCode::kCorruption) << flush.ToString();
  AlignedBuffer origin(4 * K);
  ASSERT_TRUE(rig_.raw_origin().Read(0, origin.data(), 4 * K).ok());
  EXPECT_TRUE(std::all_of(origin.data(), origin.data() + 4 * K, [](uint8_t c) { return c == 0; }))
      << "the cleaner wrote unproven data to the origin";
  // Overwriting the block replaces what was lost.
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * K, 9).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * K, 9));
  EXPECT_TRUE(rig_.engine().Flush().ok());
}

TEST_F(EngineFaultTest, PastTheThresholdTheCacheFailsAndPassesThrough) {
  config_.error_threshold = 3;
  Create(CacheMode::kWriteBack, /*cleaner=*/true);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 16 * K, 1).ok());  // dirty, on the cache
  rig_.cache().FailAlways(kFaultWrite);
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(WritePattern(rig_.engine(), (100 + i) * 4 * K, 4 * K, 2).ok()) << i;
  }
  EXPECT_TRUE(rig_.engine().stats().failed);
  for (uint64_t i = 0; i < 8; ++i) EXPECT_TRUE(HasPattern(rig_.engine(), (100 + i) * 4 * K, 4 * K, 2));
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 16 * K, 1));
  // The cleaner moves what was dirty to the origin on its own.
  for (int i = 0; i < 400 && rig_.engine().stats().dirty_lines > 0; ++i) {  // up to 20 s
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 0u);
  EXPECT_TRUE(rig_.OriginHasPattern(0, 16 * K, 1));
}

}  // namespace
}  // namespace cachecore::testing
