// The engine's asynchronous requests: hits served on the reactor with many
// cache reads in flight and completing in any order; misses, writes, trims
// and syncs on the workers; a cached block that fails its checksum repaired
// as the synchronous path does; and the same durability as Write and Sync.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "cachecore/devices/reactor.h"
#include "cachecore/engine/steps.h"
#include "cachecore/metadata/superblock.h"
#include "support/async_requests.h"
#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

using cachecore::testing::kBlock;

class EngineAsyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineConfig config;
    config.line_size = 16 * 1024;
    config.mode = CacheMode::kWriteBack;
    config.background_cleaner = false;
    ASSERT_TRUE(rig_.Create(config).ok());
    config_ = config;
    rig_.cache().CompleteOutOfOrder(true);
  }
  EngineRig rig_;
  EngineConfig config_;
};

TEST_F(EngineAsyncTest, HitsAreServedOnTheReactorManyAtOnceInAnyOrder) {
  constexpr size_t kReads = 64;
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, kReads * kBlock, 7).ok());  // cached, dirty
  StatsSnapshot before = rig_.engine().stats();
  std::vector<AlignedBuffer> buffers;
  for (size_t i = 0; i < kReads; ++i) buffers.emplace_back(kBlock);
  Completions done(kReads);
  OnReactor([&] {
    // Backwards, so that neighbours do not simply complete in order.
    for (size_t i = kReads; i-- > 0;) {
      rig_.engine().ReadAsync(i * kBlock, buffers[i].data(), kBlock, done.at(i));
    }
    // Every read returned and none has completed: all 64 are in flight at once.
    EXPECT_EQ(done.count(), 0u);
  }, done, kReads);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(done.on_reactor(), kReads);  // not one went to the workers
  for (size_t i = 0; i < kReads; ++i) {
    AlignedBuffer want(kBlock);
    FillPattern(want.data(), i * kBlock, kBlock, 7);
    EXPECT_EQ(std::memcmp(buffers[i].data(), want.data(), kBlock), 0) << "block " << i;
  }
  StatsSnapshot after = rig_.engine().stats();
  EXPECT_EQ(after.read_hits - before.read_hits, kReads);
  EXPECT_EQ(after.read_misses, before.read_misses);
  // The engine's own count of requests in flight saw all of them at once,
  // and each answered.
  EXPECT_EQ(after.peak_requests_in_flight, kReads);
  EXPECT_EQ(after.requests_in_flight, 0u);
}

TEST_F(EngineAsyncTest, AMultiLineHitIsOneRequestOnTheReactor) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 256 * 1024, 3).ok());  // 16 lines
  AlignedBuffer buffer(256 * 1024);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(0, buffer.data(), 256 * 1024, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(done.on_reactor(), 1u);
  AlignedBuffer want(256 * 1024);
  FillPattern(want.data(), 0, 256 * 1024, 3);
  EXPECT_EQ(std::memcmp(buffer.data(), want.data(), 256 * 1024), 0);
}

TEST_F(EngineAsyncTest, MissesAreServedOnTheReactorAndPromoted) {
  rig_.origin().CompleteOutOfOrder(true);
  AlignedBuffer data(kBlock);
  FillPattern(data.data(), 40 * kBlock, kBlock, 9);
  ASSERT_TRUE(rig_.raw_origin().Write(40 * kBlock, data.data(), kBlock).ok());
  AlignedBuffer got(kBlock);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(40 * kBlock, got.data(), kBlock, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(std::memcmp(got.data(), data.data(), kBlock), 0);
  EXPECT_EQ(rig_.engine().stats().read_misses, 1u);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  // Promoted: the next read of it is a hit, on the reactor.
  Completions again(1);
  OnReactor([&] { rig_.engine().ReadAsync(40 * kBlock, got.data(), kBlock, again.at(0)); }, again, 1);
  EXPECT_EQ(again.on_reactor(), 1u);
  EXPECT_EQ(rig_.engine().stats().read_hits, 1u);
  EXPECT_EQ(std::memcmp(got.data(), data.data(), kBlock), 0);
}

// Cached blocks from the cache (dirty ones only there), missing ones from
// the origin, in one request over several lines; the missing ones promoted.
TEST_F(EngineAsyncTest, AReadOfCachedAndMissingLinesIsOneRequestOnTheReactor) {
  rig_.origin().CompleteOutOfOrder(true);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * kBlock, 1).ok());  // line 0, dirty
  AlignedBuffer origin(12 * kBlock);
  FillPattern(origin.data(), 4 * kBlock, 12 * kBlock, 2);
  ASSERT_TRUE(rig_.raw_origin().Write(4 * kBlock, origin.data(), 12 * kBlock).ok());
  StatsSnapshot before = rig_.engine().stats();
  AlignedBuffer got(16 * kBlock);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(0, got.data(), 16 * kBlock, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  AlignedBuffer want(16 * kBlock);
  FillPattern(want.data(), 0, 4 * kBlock, 1);
  FillPattern(want.data() + 4 * kBlock, 4 * kBlock, 12 * kBlock, 2);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), 16 * kBlock), 0);
  StatsSnapshot after = rig_.engine().stats();
  EXPECT_EQ(after.read_hits - before.read_hits, 4u);
  EXPECT_EQ(after.read_misses - before.read_misses, 12u);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  // The promoted copies hold what the origin holds, and survive a restart.
  EXPECT_TRUE(rig_.engine().CheckCleanDataForTest([](uint64_t) { return false; }).ok());
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  StatsSnapshot reopened = rig_.engine().stats();
  EXPECT_TRUE(HasPattern(rig_.engine(), 4 * kBlock, 12 * kBlock, 2));
  EXPECT_EQ(rig_.engine().stats().read_hits - reopened.read_hits, 12u);
}

// A cache whose every slot holds a line (a line = 4 blocks), as a full
// cache does, in `mode`: clean lines by reads, dirty ones by writes.
class FullCacheTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kLine = 16 * 1024;
  void Fill(CacheMode mode) {
    config_.line_size = kLine;
    config_.mode = mode;
    config_.sequential_cutoff = 0;
    config_.background_cleaner = false;
    ASSERT_TRUE(rig_.Create(config_).ok());
    lines_ = rig_.engine().capacity_lines();
    AlignedBuffer line(kLine);
    for (uint64_t i = 0; i < lines_; ++i) {
      if (mode == CacheMode::kWriteBack) ASSERT_TRUE(WritePattern(rig_.engine(), i * kLine, kLine, 1).ok());
      else ASSERT_TRUE(rig_.engine().Read(i * kLine, line.data(), kLine).ok());
    }
    ASSERT_EQ(rig_.engine().stats().occupancy_lines, lines_);
    ASSERT_EQ(rig_.engine().stats().evictions, 0u);
  }
  EngineRig rig_;
  EngineConfig config_;
  uint64_t lines_ = 0;
};

// A miss into a full cache of clean lines evicts one on the reactor; the
// victim's record is deleted in the same store write as its slot's new one.
TEST_F(FullCacheTest, AMissEvictsACleanLineOnTheReactor) {
  Fill(CacheMode::kWriteThrough);
  const uint64_t missing = (lines_ + 5) * kLine;
  AlignedBuffer data(kBlock);
  FillPattern(data.data(), missing, kBlock, 3);
  ASSERT_TRUE(rig_.raw_origin().Write(missing, data.data(), kBlock).ok());
  AlignedBuffer got(kBlock);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(missing, got.data(), kBlock, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(std::memcmp(got.data(), data.data(), kBlock), 0);
  EXPECT_EQ(rig_.engine().stats().evictions, 1u);
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, lines_);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  EXPECT_TRUE(rig_.engine().CheckCleanDataForTest([](uint64_t) { return false; }).ok());
  // The promoted line is a hit; every line reads what the origin holds,
  // also after losing what was not synced.
  Completions again(1);
  OnReactor([&] { rig_.engine().ReadAsync(missing, got.data(), kBlock, again.at(0)); }, again, 1);
  EXPECT_EQ(rig_.engine().stats().read_hits, 1u);
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), missing, kBlock, 3));
  AlignedBuffer line(kLine), origin(kLine);
  for (uint64_t i = 0; i < lines_; ++i) {
    ASSERT_TRUE(rig_.engine().Read(i * kLine, line.data(), kLine).ok());
    ASSERT_TRUE(rig_.raw_origin().Read(i * kLine, origin.data(), kLine).ok());
    EXPECT_EQ(std::memcmp(line.data(), origin.data(), kLine), 0) << "line " << i;
  }
}

// With every line dirty, a miss is served from the origin and not promoted:
// it never waits for a victim to be cleaned.
TEST_F(FullCacheTest, AMissIntoACacheFullOfDirtyLinesIsNotPromoted) {
  Fill(CacheMode::kWriteBack);
  const uint64_t dirty = rig_.engine().stats().dirty_lines;
  const uint64_t missing = (lines_ + 5) * kLine;
  AlignedBuffer got(kBlock);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(missing, got.data(), kBlock, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  StatsSnapshot after = rig_.engine().stats();
  EXPECT_EQ(after.read_misses, 1u);
  EXPECT_EQ(after.evictions, 0u);
  EXPECT_EQ(after.dirty_lines, dirty);
  EXPECT_EQ(after.cleaner_writes, 0u);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

// A write-back write to a line not cached takes a clean victim's slot on
// the reactor, and is durable once synced.
TEST_F(FullCacheTest, AWriteEvictsACleanLineOnTheReactor) {
  Fill(CacheMode::kWriteThrough);
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteBack).ok());
  config_.mode = CacheMode::kWriteBack;
  const uint64_t first = (lines_ + 5) * kLine / kBlock;
  Completions done(1);
  WriteOnReactor(rig_.engine(), first, 1, 2, 8, false, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().evictions, 1u);
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 1u);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), first * kBlock, 2 * kBlock, 8));
  EXPECT_TRUE(rig_.engine().CheckCleanDataForTest([](uint64_t) { return false; }).ok());
}

// The promotion's cache write fails: the read is served all the same, the
// slot it took is given back (its record deleted first), and the line is
// promoted by a later read.
TEST_F(EngineAsyncTest, AFailedPromotionGivesItsSlotBack) {
  AlignedBuffer data(kBlock);
  FillPattern(data.data(), 40 * kBlock, kBlock, 9);
  ASSERT_TRUE(rig_.raw_origin().Write(40 * kBlock, data.data(), kBlock).ok());
  const uint64_t occupied = rig_.engine().stats().occupancy_lines;
  rig_.cache().FailNth(kFaultWrite, 1);
  AlignedBuffer got(kBlock);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(40 * kBlock, got.data(), kBlock, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(std::memcmp(got.data(), data.data(), kBlock), 0);
  EXPECT_EQ(rig_.engine().stats().errors.cache_write, 1u);
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, occupied);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  Completions again(1);
  OnReactor([&] { rig_.engine().ReadAsync(40 * kBlock, got.data(), kBlock, again.at(0)); }, again, 1);
  EXPECT_EQ(std::memcmp(got.data(), data.data(), kBlock), 0);
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, occupied + 1);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  EXPECT_TRUE(rig_.engine().CheckCleanDataForTest([](uint64_t) { return false; }).ok());
}

// Transient faults on the reactor: each failed read is counted once and
// the client sees what docs/reliability.md's table says, as on the workers
// (which read everything again: a transient fault went unseen and
// uncounted, and a flaky cache device never reached its error threshold).
TEST_F(EngineAsyncTest, AnOriginReadErrorFailsTheMissOnceAndIsCounted) {
  rig_.origin().CompleteOutOfOrder(true);
  rig_.origin().FailNth(kFaultRead, 1);
  AlignedBuffer got(kBlock);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(40 * kBlock, got.data(), kBlock, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 1u);
  EXPECT_EQ(rig_.engine().stats().errors.origin_read, 1u);
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, 0u);  // nothing half-cached
  Completions again(1);
  OnReactor([&] { rig_.engine().ReadAsync(40 * kBlock, got.data(), kBlock, again.at(0)); }, again, 1);
  EXPECT_EQ(again.failed(), 0u) << again.last_error();
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

TEST_F(EngineAsyncTest, ACacheReadErrorOnADirtyHitFailsThatReadOnceAndIsCounted) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * kBlock, 5).ok());  // dirty: only the cache has it
  rig_.cache().FailNth(kFaultRead, 1);
  AlignedBuffer got(4 * kBlock);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(0, got.data(), 4 * kBlock, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 1u);
  EXPECT_NE(done.last_error().find("cannot be read from the cache"), std::string::npos) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().errors.cache_read, 1u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * kBlock, 5));  // the next read works
}

TEST_F(EngineAsyncTest, ACleanHitWithACacheReadErrorIsServedAndCountedOnce) {
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteThrough).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * kBlock, 5).ok());  // cached and clean
  rig_.cache().FailNth(kFaultRead, 1);
  AlignedBuffer got(4 * kBlock);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(0, got.data(), 4 * kBlock, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().errors.cache_read, 1u);
  AlignedBuffer want(4 * kBlock);
  FillPattern(want.data(), 0, 4 * kBlock, 5);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), 4 * kBlock), 0);
}

TEST_F(EngineAsyncTest, ADirtyBlockThatFailsItsChecksumFailsTheReadOnTheReactor) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * kBlock, 5).ok());  // dirty
  ASSERT_TRUE(rig_.engine().Sync().ok());  // out of the device's volatile cache
  AlignedBuffer junk(1 << 20);
  std::memset(junk.data(), 0xA5, junk.size());
  ASSERT_TRUE(rig_.raw_cache().Write(kDataOffset, junk.data(), junk.size()).ok());
  AlignedBuffer got(4 * kBlock);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(0, got.data(), 4 * kBlock, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 1u);
  EXPECT_NE(done.last_error().find("fails its checksum"), std::string::npos) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().errors.checksum_failed, 1u);
}

TEST_F(EngineAsyncTest, ACleanBlockThatFailsItsChecksumIsRepairedFromTheOrigin) {
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteThrough).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * kBlock, 5).ok());  // cached and clean
  ASSERT_TRUE(rig_.engine().Sync().ok());  // out of the device's volatile cache
  // Garbage over the cache device's whole data area.
  AlignedBuffer junk(1 << 20);
  std::memset(junk.data(), 0xA5, junk.size());
  ASSERT_TRUE(rig_.raw_cache().Write(kDataOffset, junk.data(), junk.size()).ok());
  AlignedBuffer got(4 * kBlock);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(0, got.data(), 4 * kBlock, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  // Repaired on the reactor (the miss path, holding the line): the
  // origin's copies read, the blocks dropped and promoted afresh.
  AlignedBuffer want(4 * kBlock);
  FillPattern(want.data(), 0, 4 * kBlock, 5);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), 4 * kBlock), 0);
  EXPECT_EQ(rig_.engine().stats().errors.checksum_repaired, 4u);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  // The copies written again are proven hits now; and a cut loses nothing.
  Completions again(1);
  OnReactor([&] { rig_.engine().ReadAsync(0, got.data(), 4 * kBlock, again.at(0)); }, again, 1);
  EXPECT_EQ(again.failed(), 0u) << again.last_error();
  EXPECT_EQ(again.on_reactor(), 1u);  // a hit
  EXPECT_EQ(std::memcmp(got.data(), want.data(), 4 * kBlock), 0);
  EXPECT_EQ(rig_.engine().stats().errors.checksum_repaired, 4u);
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * kBlock, 5));
  EXPECT_EQ(rig_.engine().stats().errors.checksum_failed, 0u);
}

// A read of a cached line whose clean block fails its checksum and of a line
// not cached: both served by the miss path on the reactor, the bad block
// repaired, the other line promoted.
TEST_F(EngineAsyncTest, AMissThatFindsACleanBlockFailingItsChecksumRepairsItOnTheReactor) {
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteThrough).ok());
  rig_.origin().CompleteOutOfOrder(true);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * kBlock, 5).ok());  // line 0 cached, clean
  AlignedBuffer origin(4 * kBlock);
  FillPattern(origin.data(), 4 * kBlock, 4 * kBlock, 6);
  ASSERT_TRUE(rig_.raw_origin().Write(4 * kBlock, origin.data(), 4 * kBlock).ok());  // line 1, not cached
  ASSERT_TRUE(rig_.engine().Sync().ok());  // out of the device's volatile cache
  AlignedBuffer junk(kBlock);
  std::memset(junk.data(), 0xA5, kBlock);
  ASSERT_TRUE(rig_.raw_cache().Write(kDataOffset + kBlock, junk.data(), kBlock).ok());  // line 0's block 1
  AlignedBuffer got(8 * kBlock);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(0, got.data(), 8 * kBlock, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  AlignedBuffer want(8 * kBlock);
  FillPattern(want.data(), 0, 4 * kBlock, 5);
  FillPattern(want.data() + 4 * kBlock, 4 * kBlock, 4 * kBlock, 6);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), 8 * kBlock), 0);
  const StatsSnapshot s = rig_.engine().stats();
  EXPECT_EQ(s.errors.checksum_repaired, 1u);
  EXPECT_EQ(s.read_hits, 4u);    // line 0's blocks, the repaired one too (as on the workers)
  EXPECT_EQ(s.read_misses, 4u);
  EXPECT_EQ(s.occupancy_lines, 2u);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  EXPECT_TRUE(rig_.engine().CheckCleanDataForTest([](uint64_t) { return false; }).ok());
}

TEST_F(EngineAsyncTest, AsyncWritesAndSyncSurviveAPowerCut) {
  constexpr size_t kWrites = 32;
  std::vector<AlignedBuffer> buffers;
  for (size_t i = 0; i < kWrites; ++i) {
    buffers.emplace_back(kBlock);
    FillPattern(buffers[i].data(), i * kBlock, kBlock, 11);
  }
  Completions writes(kWrites);
  OnReactor([&] {
    for (size_t i = 0; i < kWrites; ++i) {
      rig_.engine().WriteAsync(i * kBlock, buffers[i].data(), kBlock, false, writes.at(i));
    }
  }, writes, kWrites);
  EXPECT_EQ(writes.failed(), 0u) << writes.last_error();
  Completions sync(1);
  OnReactor([&] { rig_.engine().SyncAsync(sync.at(0)); }, sync, 1);
  EXPECT_EQ(sync.failed(), 0u) << sync.last_error();
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  for (size_t i = 0; i < kWrites; ++i) EXPECT_TRUE(HasPattern(rig_.engine(), i * kBlock, kBlock, 11));
}

TEST_F(EngineAsyncTest, WriteBackWritesOverCachedLinesAreServedOnTheReactor) {
  // A line each (16 KiB): two writes in flight on one line would share
  // its stripe, and the second would go to the workers.
  constexpr size_t kWrites = 32, kLineBlocks = 4;  // under the sequential cutoff
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, kWrites * kLineBlocks * kBlock, 1).ok());  // cached, dirty
  StatsSnapshot before = rig_.engine().stats();
  Completions done(kWrites);
  WriteOnReactor(rig_.engine(), 0, kWrites, kLineBlocks, 2, false, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kWrites * kLineBlocks * kBlock, 2));
  StatsSnapshot after = rig_.engine().stats();
  EXPECT_EQ(after.write_hits - before.write_hits, kWrites * kLineBlocks);
  EXPECT_EQ(after.peak_requests_in_flight, kWrites);
  EXPECT_EQ(after.requests_in_flight, 0u);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  // Acknowledged, then synced: they survive losing every unsynced write.
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kWrites * kLineBlocks * kBlock, 2));
}

TEST_F(EngineAsyncTest, AMultiLineWriteIsOneRequestOnTheReactor) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 64 * kBlock, 1).ok());  // 16 lines
  Completions done(1);
  WriteOnReactor(rig_.engine(), 2, 1, 60, 4, false, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 2 * kBlock, 1));
  EXPECT_TRUE(HasPattern(rig_.engine(), 2 * kBlock, 60 * kBlock, 4));
  EXPECT_TRUE(HasPattern(rig_.engine(), 62 * kBlock, 2 * kBlock, 1));
}

// Requests for a line another request holds wait on the reactor (parked on
// its stripe, tried again once it is let go), not on a worker each: here
// four writes to the blocks of one line and a read of it, all on one
// reactor, the first write holding the line across its cache write.
TEST_F(EngineAsyncTest, RequestsForABusyLineWaitOnTheReactorNotOnWorkers) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * kBlock, 1).ok());  // line 0, cached
  AlignedBuffer data(4 * kBlock), got(4 * kBlock);
  FillPattern(data.data(), 0, 4 * kBlock, 2);
  Completions done(5);
  OnReactor([&] {
    for (size_t b = 0; b < 4; ++b) {
      rig_.engine().WriteAsync(b * kBlock, data.data() + b * kBlock, kBlock, false, done.at(b));
    }
    rig_.engine().ReadAsync(0, got.data(), 4 * kBlock, done.at(4));
  }, done, 5);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  // The read ran while the writes did: each block it returned is the old
  // data or the new, whole. (Parked requests are tried again in the order
  // they parked, but a write woken, parked again and woken by the next
  // release may run before a read woken by the first: the requests are
  // concurrent, and no order between them is promised.)
  AlignedBuffer old(4 * kBlock);
  FillPattern(old.data(), 0, 4 * kBlock, 1);
  for (size_t b = 0; b < 4; ++b) {
    const size_t at = b * kBlock;
    EXPECT_TRUE(std::memcmp(got.data() + at, data.data() + at, kBlock) == 0 ||
                std::memcmp(got.data() + at, old.data() + at, kBlock) == 0) << "block " << b;
  }
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * kBlock, 2));
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

// The cleaner tries a line's stripe while a hit holds it shared: its failed
// try marks the stripe wanted (so that new hits stay away and the cleaner
// gets in next time), a mark that outlives the hit. The next request finds
// the stripe free but marked, with nobody to park behind: it clears the
// mark and is served on its reactor (it took a worker before).
TEST_F(EngineAsyncTest, AStripeMarkedByTheCleanersFailedTryDoesNotSendRequestsToWorkers) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 16 * 4 * kBlock, 1).ok());  // 16 lines, dirty
  ASSERT_TRUE(rig_.engine().SetCleaner({.dirty_target_pct = 1, .dirty_high_pct = 3,
                                        .dirty_low_pct = 2, .batch_lines = 16}).ok());
  AlignedBuffer got(kBlock);
  Completions hit(1);
  OnReactor([&] {
    rig_.engine().ReadAsync(0, got.data(), kBlock, hit.at(0));  // its cache read held back
    Result<uint64_t> cleaned = rig_.engine().RunCleanerTickForTest(10);
    ASSERT_TRUE(cleaned.ok()) << cleaned.status().ToString();
    EXPECT_EQ(cleaned.value(), 15u);  // all but the line the hit holds
  }, hit, 1);
  EXPECT_EQ(hit.on_reactor(), 1u);
  AlignedBuffer data(kBlock);
  FillPattern(data.data(), kBlock, kBlock, 2);
  Completions after(2);
  OnReactor([&] {
    rig_.engine().ReadAsync(0, got.data(), kBlock, after.at(0));
    rig_.engine().WriteAsync(kBlock, data.data(), kBlock, false, after.at(1));
  }, after, 2);
  EXPECT_EQ(after.failed(), 0u) << after.last_error();
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kBlock, 1));
  EXPECT_TRUE(HasPattern(rig_.engine(), kBlock, kBlock, 2));
}

// Dirty data that a sync made durable is announced before it is rewritten
// (its record, synced, says the cache may hold newer data for the block):
// on the reactor, the committer syncing the announcements of every write
// waiting with it. A cut after the rewrite landed, before its own record,
// then reads the new data, never a block that fails its checksum (the
// stable record would vouch for the old data); a write to a line not cached
// takes a free slot.
TEST_F(EngineAsyncTest, RewritesOfSyncedDirtyDataAnnounceOnTheReactor) {
  constexpr size_t kWrites = 8;  // a line each
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, kWrites * 4 * kBlock, 1).ok());
  ASSERT_TRUE(rig_.engine().Sync().ok());
  Completions rewrite(kWrites);
  WriteOnReactor(rig_.engine(), 0, kWrites, 4, 3, false, rewrite);
  EXPECT_EQ(rewrite.failed(), 0u) << rewrite.last_error();
  Completions fresh(1);
  WriteOnReactor(rig_.engine(), 100, 1, 1, 3, false, fresh);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kKeepUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kWrites * 4 * kBlock, 3));
  EXPECT_EQ(rig_.engine().stats().errors.checksum_failed, 0u);
  // Once announced in this epoch, a block's next rewrite needs nothing.
  Completions again(1);
  WriteOnReactor(rig_.engine(), 0, 1, 1, 5, false, again);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kBlock, 5));
  EXPECT_TRUE(HasPattern(rig_.engine(), kBlock, 3 * kBlock, 3));
}

// A write over synced dirty data and over lines not cached announces, then
// places those lines once the announcement is durable, on the reactor (it
// took a worker before); a cut after it landed, before its records, reads
// the new data of the rewritten line and the old of the others.
TEST_F(EngineAsyncTest, AWriteThatAnnouncesPlacesItsNewLinesOnTheReactor) {
  constexpr uint64_t kLine = 4 * kBlock;
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 2 * kLine, 1).ok());
  ASSERT_TRUE(rig_.engine().Sync().ok());
  const uint64_t lines_before = rig_.engine().stats().occupancy_lines;
  Completions done(1);
  WriteOnReactor(rig_.engine(), 4, 1, 12, 2, false, done);  // line 1 (dirty, synced), lines 2 and 3
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, lines_before + 2);
  EXPECT_EQ(rig_.engine().stats().write_hits, 4u);  // line 1's
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), kLine, 3 * kLine, 2));
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kKeepUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kLine, 1));
  EXPECT_TRUE(HasPattern(rig_.engine(), kLine, kLine, 2));
  EXPECT_EQ(rig_.engine().stats().errors.checksum_failed, 0u);
  // The new lines, not synced: each block the write's data or the origin's
  // zeroes, never anything else.
  AlignedBuffer got(kBlock), want(kBlock), zeroes(kBlock);
  for (uint64_t b = 8; b < 16; ++b) {
    ASSERT_TRUE(rig_.engine().Read(b * kBlock, got.data(), kBlock).ok());
    FillPattern(want.data(), b * kBlock, kBlock, 2);
    EXPECT_TRUE(std::memcmp(got.data(), want.data(), kBlock) == 0 ||
                std::memcmp(got.data(), zeroes.data(), kBlock) == 0) << "block " << b;
  }
}

// A device whose requests wait (its Submit runs them to completion before
// it returns, BlockDevice's default, as the rig's devices in order do):
// the calling thread's reactor waits for it, and every kind of request is
// served all the same.
TEST(EngineSyncCallsTest, OverDevicesThatWaitAreServedOnTheCallersReactor) {
  EngineRig rig;
  EngineConfig config;
  config.line_size = 4096;
  config.mode = CacheMode::kWriteBack;
  config.background_cleaner = false;
  ASSERT_TRUE(rig.Create(config).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 16 * kBlock, 3).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 40 * kBlock + 512, kBlock, 3).ok());
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 16 * kBlock, 3));
  EXPECT_TRUE(HasPattern(rig.engine(), 40 * kBlock + 512, kBlock, 3));
  ASSERT_TRUE(rig.engine().Discard(0, kBlock).ok());
  EXPECT_EQ(rig.engine().stats().requests_in_flight, 0u);
}

// Requests made off any reactor (a caller's own thread) are served on the
// engine's own reactor, many at once, never one per worker thread; a
// shutdown waits for them.
TEST(EngineOwnReactorTest, RequestsMadeOffAnyReactorAreServedOnTheEnginesOwn) {
  EngineRig rig;
  EngineConfig config;
  config.line_size = 4096;
  config.mode = CacheMode::kWriteBack;
  config.background_cleaner = false;
  config.sequential_cutoff = 0;
  ASSERT_TRUE(rig.Create(config).ok());
  rig.cache().CompleteOutOfOrder(true);
  rig.origin().CompleteOutOfOrder(true);
  AlignedBuffer data(32 * kBlock), got(32 * kBlock);
  FillPattern(data.data(), 0, data.size(), 4);
  Completions writes(32), reads(32), trims(1);
  for (uint64_t i = 0; i < 32; ++i) {
    rig.engine().WriteAsync(i * kBlock, data.data() + i * kBlock, kBlock, /*fua=*/i == 31, writes.at(i));
  }
  writes.Wait(32);
  for (uint64_t i = 0; i < 32; ++i) rig.engine().ReadAsync(i * kBlock, got.data() + i * kBlock, kBlock, reads.at(i));
  rig.engine().DiscardAsync(100 * kBlock, kBlock, trims.at(0));
  reads.Wait(32);
  trims.Wait(1);
  EXPECT_EQ(writes.failed() + reads.failed() + trims.failed(), 0u) << reads.last_error();
  EXPECT_EQ(reads.on_reactor(), 32u);  // a write is answered where its record is put
  EXPECT_EQ(std::memcmp(got.data(), data.data(), data.size()), 0);
  // A bad request fails at once, with the synchronous call's error.
  Completions bad(1);
  rig.engine().ReadAsync(1, got.data(), kBlock, bad.at(0));
  EXPECT_EQ(bad.failed(), 1u);
  Completions late(1);
  rig.engine().WriteAsync(40 * kBlock, data.data(), kBlock, false, late.at(0));
  ASSERT_TRUE(rig.engine().Shutdown().ok());
  EXPECT_EQ(late.count(), 1u) << "the shutdown did not wait for a request taken";
}

// In a cache full of dirty lines, on the reactor: read misses are served
// from the origin and not promoted, writes to lines not cached go around
// the cache to the origin (a line or several), and nothing is written to
// the origin for them but the writes' own data.
TEST(EngineAsyncFullTest, ACacheFullOfDirtyLinesIsGoneAroundOnTheReactor) {
  EngineRig rig;  // 256 lines of 4 KiB
  EngineConfig config;
  config.line_size = 4096;
  config.mode = CacheMode::kWriteBack;
  config.sequential_cutoff = 0;
  config.background_cleaner = false;
  ASSERT_TRUE(rig.Create(config).ok());
  rig.cache().CompleteOutOfOrder(true);
  rig.origin().CompleteOutOfOrder(true);
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 256 * kBlock, 7).ok());
  const uint64_t origin_writes = rig.origin().operations(kFaultWrite);
  AlignedBuffer got(64 * kBlock);
  Completions read(2);
  OnReactor([&] {
    rig.engine().ReadAsync(300 * kBlock, got.data(), kBlock, read.at(0));
    rig.engine().ReadAsync(400 * kBlock, got.data() + kBlock, 16 * kBlock, read.at(1));
  }, read, 2);
  EXPECT_EQ(read.failed(), 0u) << read.last_error();
  EXPECT_EQ(rig.origin().operations(kFaultWrite), origin_writes);
  Completions one(1), several(1);
  WriteOnReactor(rig.engine(), 500, 1, 1, 9, false, one);
  WriteOnReactor(rig.engine(), 600, 1, 16, 9, false, several);
  EXPECT_EQ(one.failed() + several.failed(), 0u);
  EXPECT_EQ(rig.origin().operations(kFaultWrite), origin_writes + 2);  // the writes themselves
  const StatsSnapshot s = rig.engine().stats();
  EXPECT_EQ(s.dirty_lines, 256u);
  EXPECT_EQ(s.occupancy_lines, 256u);
  EXPECT_EQ(s.bypassed_no_space, 1u + 16 + 1 + 16);
  EXPECT_TRUE(HasPattern(rig.engine(), 500 * kBlock, kBlock, 9));
  EXPECT_TRUE(HasPattern(rig.engine(), 600 * kBlock, 16 * kBlock, 9));
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 256 * kBlock, 7));
  EXPECT_TRUE(rig.engine().CheckRecordsAgreeForTest().ok());
}

// In a full cache of clean lines, a write-back write over several lines
// not cached takes a clean victim per line, each line a request of its own
// on the reactor (the workers took it before); durable once synced.
TEST(EngineAsyncFullTest, WritesOverSeveralLinesTakeCleanVictimsOnTheReactor) {
  EngineRig rig;  // 256 lines of 4 KiB
  EngineConfig config;
  config.line_size = 4096;
  config.mode = CacheMode::kWriteBack;
  config.sequential_cutoff = 0;
  config.background_cleaner = false;
  ASSERT_TRUE(rig.Create(config).ok());
  rig.cache().CompleteOutOfOrder(true);
  rig.origin().CompleteOutOfOrder(true);
  AlignedBuffer all(256 * kBlock);
  ASSERT_TRUE(rig.engine().Read(0, all.data(), all.size()).ok());  // every line cached, clean
  ASSERT_EQ(rig.engine().stats().occupancy_lines, 256u);
  Completions done(4);
  WriteOnReactor(rig.engine(), 1000, 4, 16, 5, /*fua=*/true, done);  // 4 writes of 16 lines
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  const StatsSnapshot s = rig.engine().stats();
  EXPECT_EQ(s.evictions, 64u);
  EXPECT_EQ(s.dirty_lines, 64u);
  EXPECT_EQ(s.bypassed_no_space, 0u);
  EXPECT_EQ(s.requests_in_flight, 0u);
  EXPECT_TRUE(rig.engine().CheckRecordsAgreeForTest().ok());
  ASSERT_TRUE(rig.PowerCutAndReopen(config, PowerCutMode::kDropUnsynced).ok());  // FUA: durable
  EXPECT_TRUE(HasPattern(rig.engine(), 1000 * kBlock, 64 * kBlock, 5));
}

// A write over a line of synced dirty data and over lines not cached, in a
// cache with no room for them: line by line on the reactor, the cached one
// written back (announced), the others around the cache.
TEST(EngineAsyncFullTest, AWriteWithSomeLinesCachedAndNoRoomGoesLineByLine) {
  EngineRig rig;  // 256 lines of 4 KiB
  EngineConfig config;
  config.line_size = 4096;
  config.mode = CacheMode::kWriteBack;
  config.sequential_cutoff = 0;
  config.background_cleaner = false;
  ASSERT_TRUE(rig.Create(config).ok());
  rig.cache().CompleteOutOfOrder(true);
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 256 * kBlock, 1).ok());  // full of dirty lines
  ASSERT_TRUE(rig.engine().Sync().ok());
  Completions done(1);
  WriteOnReactor(rig.engine(), 255, 1, 8, 2, false, done);  // line 255 cached, 256..262 not
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  const StatsSnapshot s = rig.engine().stats();
  EXPECT_EQ(s.bypassed_no_space, 7u);
  EXPECT_EQ(s.write_hits, 1u);
  EXPECT_EQ(s.dirty_lines, 256u);
  EXPECT_TRUE(HasPattern(rig.engine(), 255 * kBlock, 8 * kBlock, 2));
  ASSERT_TRUE(rig.engine().Sync().ok());
  ASSERT_TRUE(rig.PowerCutAndReopen(config, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig.engine(), 255 * kBlock, 8 * kBlock, 2));
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 255 * kBlock, 1));
}

TEST_F(EngineAsyncTest, AFuaWriteOnTheReactorIsDurableWhenAnswered) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * kBlock, 1).ok());
  Completions done(4);
  WriteOnReactor(rig_.engine(), 0, 4, 1, 6, true, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * kBlock, 6));
}

// A cache write that fails on the reactor: the data goes to the origin,
// durably, on a worker, and the write succeeds.
// One cache write covering two lines (their slots adjacent) fails once: one
// error towards the threshold, not one per line it covered.
TEST_F(EngineAsyncTest, AFailedCacheWriteOverTwoLinesCountsOneError) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 8 * kBlock, 1).ok());  // lines 0 and 1, slots 0 and 1
  rig_.cache().FailNth(kFaultWrite, 1);
  Completions done(1);
  WriteOnReactor(rig_.engine(), 0, 1, 8, 2, false, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();  // to the origin instead
  EXPECT_EQ(rig_.engine().stats().errors.cache_write, 1u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 8 * kBlock, 2));
}

TEST_F(EngineAsyncTest, AFailedCacheWriteOnTheReactorGoesToTheOrigin) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * kBlock, 1).ok());
  rig_.cache().FailNth(kFaultWrite, 1);
  Completions done(1);
  WriteOnReactor(rig_.engine(), 0, 1, 4, 7, false, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().errors.cache_write, 1u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * kBlock, 7));
  AlignedBuffer origin(4 * kBlock);
  ASSERT_TRUE(rig_.raw_origin().Read(0, origin.data(), 4 * kBlock).ok());
  AlignedBuffer want(4 * kBlock);
  FillPattern(want.data(), 0, 4 * kBlock, 7);
  EXPECT_EQ(std::memcmp(origin.data(), want.data(), 4 * kBlock), 0);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

// Found by a review: a write whose cache write failed on the reactor
// handed its rest (the data to the origin) to the workers while holding its
// line's stripe; requests for that line queued ahead of it had taken every
// worker and waited for the stripe, so nothing was ever answered again.
// The rest now runs on a thread of its own and the reads park on the
// stripe: all are answered.
TEST(EngineAsyncContinuationTest, AFailedWritesRestIsNotQueuedBehindWhatWaitsForIt) {
  EngineRig rig;
  EngineConfig config;
  config.line_size = 16 * 1024;
  config.mode = CacheMode::kWriteBack;
  config.background_cleaner = false;
  constexpr uint32_t kReads = 2;
  ASSERT_TRUE(rig.Create(config).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 4 * kBlock, 1).ok());  // cached: the write stays on the reactor
  rig.cache().CompleteOutOfOrder(true);
  rig.cache().FailNth(kFaultWrite, 1);
  AlignedBuffer data(kBlock);
  FillPattern(data.data(), 0, kBlock, 8);
  std::vector<AlignedBuffer> reads;
  for (uint32_t i = 0; i < kReads; ++i) reads.emplace_back(kBlock);
  const size_t expected = 1 + reads.size();
  Completions done(expected);
  auto reactor = Reactor::Create();
  ASSERT_TRUE(reactor.ok());
  Reactor* r = reactor.value().get();
  std::thread runner([r] { r->Run(); });
  // The reads find the stripe held and park on it; the write's cache write
  // completes (failed) only after them.
  FnTask task([&] {
    rig.engine().WriteAsync(0, data.data(), kBlock, false, done.at(0));
    for (size_t i = 0; i < reads.size(); ++i) rig.engine().ReadAsync(0, reads[i].data(), kBlock, done.at(1 + i));
  });
  r->Post(&task);
  if (!done.WaitFor(expected, std::chrono::seconds(20))) {
    ADD_FAILURE() << done.count() << " of " << expected << " requests answered after 20 s: a deadlock";
    std::fflush(stdout);
    std::_Exit(1);  // the engine's threads cannot be joined
  }
  r->Stop();
  runner.join();
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_TRUE(HasPattern(rig.engine(), 0, kBlock, 8));
}

// Syncs from a reactor wait as entries of the group commit, not as a thread
// each: while one sync runs, however many arrive are covered by the next.
// (Run on the engine's former workers, one of them, each sync took it in
// turn and ran a sync of its own: 1 + 48 of them.)
std::function<void(std::string_view)>* g_step = nullptr;
void RunStep(const char* step) { (*g_step)(step); }

TEST(EngineAsyncSyncTest, SyncsFromAReactorShareSyncsWithoutAThreadEach) {
  EngineRig rig;
  EngineConfig config;
  config.mode = CacheMode::kWriteBack;
  config.background_cleaner = false;
  ASSERT_TRUE(rig.Create(config).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 16 * kBlock, 1).ok());
  std::mutex mu;
  std::condition_variable cv;
  int syncs = 0;
  bool release = false;
  std::function<void(std::string_view)> step = [&](std::string_view name) {
    if (name != "sync-1-epoch-begun") return;
    std::unique_lock lock(mu);
    if (++syncs == 1) {
      cv.notify_all();
      cv.wait(lock, [&] { return release; });  // the first sync waits for the rest to arrive
    }
  };
  g_step = &step;
  SetStepObserver(RunStep);
  constexpr size_t kSyncs = 48;
  Completions done(kSyncs + 1);
  auto reactor = Reactor::Create();
  ASSERT_TRUE(reactor.ok());
  Reactor* r = reactor.value().get();
  std::thread runner([r] { r->Run(); });
  FnTask first([&] { rig.engine().SyncAsync(done.at(0)); });
  r->Post(&first);
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return syncs == 1; });
  }
  FnTask rest([&] {
    for (size_t i = 1; i <= kSyncs; ++i) rig.engine().SyncAsync(done.at(i));
    std::lock_guard lock(mu);
    release = true;
    cv.notify_all();
  });
  r->Post(&rest);
  const bool answered = done.WaitFor(kSyncs + 1, std::chrono::seconds(60));
  r->Stop();
  runner.join();
  SetStepObserver(nullptr);
  ASSERT_TRUE(answered) << done.count() << " of " << kSyncs + 1 << " syncs answered";
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(syncs, 2) << "syncs that arrived together each ran a sync of their own";
  EXPECT_EQ(rig.engine().stats().requests_in_flight, 0u);
}

// Found by a review: Shutdown recorded a clean shutdown while the workers
// still held writes, which then ran after it, unsynced. Now what was taken
// completes before, and is synced by it; what comes later is refused.
TEST_F(EngineAsyncTest, ShutdownCompletesAndSyncsWhatTheWorkersTook) {
  constexpr size_t kWrites = 64;
  std::vector<AlignedBuffer> buffers;
  for (size_t i = 0; i < kWrites; ++i) {
    buffers.emplace_back(kBlock);
    FillPattern(buffers[i].data(), i * kBlock, kBlock, 13);
  }
  Completions writes(kWrites);
  for (size_t i = 0; i < kWrites; ++i) {
    rig_.engine().WriteAsync(i * kBlock, buffers[i].data(), kBlock, false, writes.at(i));
  }
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  writes.Wait(kWrites);  // every one answered, none after the shutdown's sync
  EXPECT_EQ(writes.failed(), 0u) << writes.last_error();
  Completions late(1);
  rig_.engine().WriteAsync(0, buffers[0].data(), kBlock, false, late.at(0));
  late.Wait(1);
  EXPECT_EQ(late.failed(), 1u);
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  for (size_t i = 0; i < kWrites; ++i) EXPECT_TRUE(HasPattern(rig_.engine(), i * kBlock, kBlock, 13));
}

// A request over 1 MiB runs on the reactor as parts of at most 1 MiB, each
// a request of its own, and is answered once all are (a FUA write after a
// sync covered every part): it took a worker each before.
TEST(EngineAsyncSplitTest, RequestsOverAMebibyteRunOnTheReactorInParts) {
  RigOptions options;
  options.origin_size = 16 << 20;
  options.cache_data_size = 8 << 20;
  EngineRig rig(options);
  EngineConfig config;
  config.line_size = 64 * 1024;
  config.mode = CacheMode::kWriteBack;
  config.sequential_cutoff = 0;
  config.background_cleaner = false;
  ASSERT_TRUE(rig.Create(config).ok());
  rig.cache().CompleteOutOfOrder(true);
  constexpr uint64_t kBytes = 3 * (1 << 20) + 512 * 1024;
  AlignedBuffer data(kBytes), got(kBytes);
  FillPattern(data.data(), 0, kBytes, 4);
  Completions write(1);
  OnReactor([&] { rig.engine().WriteAsync(0, data.data(), kBytes, false, write.at(0)); }, write, 1);
  EXPECT_EQ(write.failed(), 0u) << write.last_error();
  // The same with FUA (answered by the group commit's round, on a worker).
  Completions fua(1);
  OnReactor([&] { rig.engine().WriteAsync(0, data.data(), kBytes, true, fua.at(0)); }, fua, 1);
  EXPECT_EQ(fua.failed(), 0u) << fua.last_error();
  Completions read(1);
  OnReactor([&] { rig.engine().ReadAsync(0, got.data(), kBytes, read.at(0)); }, read, 1);
  EXPECT_EQ(read.failed(), 0u) << read.last_error();
  EXPECT_EQ(std::memcmp(got.data(), data.data(), kBytes), 0);
  EXPECT_EQ(rig.engine().stats().read_hits, kBytes / kBlock);
  EXPECT_EQ(rig.engine().stats().requests_in_flight, 0u);
  // FUA: durable once answered, every part.
  ASSERT_TRUE(rig.PowerCutAndReopen(config, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig.engine(), 0, kBytes, 4));
  Completions trim(1);
  OnReactor([&] { rig.engine().DiscardAsync(0, kBytes, trim.at(0)); }, trim, 1);
  EXPECT_EQ(trim.failed(), 0u) << trim.last_error();
  EXPECT_EQ(rig.engine().stats().occupancy_lines, 0u);
  EXPECT_TRUE(rig.engine().CheckRecordsAgreeForTest().ok());
}

// Lines a read brought in in order sit in adjacent slots: a later hit over
// them is one cache read, not one per line.
TEST(EngineHitLayoutTest, AHitOverLinesReadInOrderIsOneCacheRead) {
  EngineRig rig;
  EngineConfig config;
  config.line_size = 4096;
  config.mode = CacheMode::kWriteThrough;
  config.sequential_cutoff = 0;
  config.background_cleaner = false;
  ASSERT_TRUE(rig.Create(config).ok());
  AlignedBuffer buf(1 << 20);
  ASSERT_TRUE(rig.engine().Read(0, buf.data(), buf.size()).ok());  // 256 lines, all missing
  ASSERT_EQ(rig.engine().stats().occupancy_lines, 256u);
  const uint64_t reads = rig.cache().operations(kFaultRead);
  ASSERT_TRUE(rig.engine().Read(64 * 1024, buf.data(), 64 * 1024).ok());
  EXPECT_EQ(rig.engine().stats().read_hits, 16u);
  EXPECT_EQ(rig.cache().operations(kFaultRead) - reads, 1u);
}

}  // namespace
}  // namespace cachecore::testing
