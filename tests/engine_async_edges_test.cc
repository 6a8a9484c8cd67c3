// Requests not in whole blocks (512-byte sectors, as a filesystem of small
// sectors or a database's direct I/O sends them), or in memory unfit for
// direct I/O, served on the reactor: many writes to different sectors of
// the same blocks at once all land (a partial block's read-modify-write
// holds its stripe throughout), in write-back and write-through, durable
// after a cut; unaligned reads; a partial block that fails its checksum is
// read from the origin instead.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "support/async_requests.h"
#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kLine = 16 * 1024;  // 4 blocks
constexpr uint64_t kSector = 512;

struct Range {
  uint64_t offset, length;
};

// Non-overlapping writes of sectors: eight to the eight sectors of block 1,
// then writes across block and line boundaries, of partial blocks at both
// ends, inside one block, and over lines not cached.
std::vector<Range> SectorWrites() {
  std::vector<Range> writes;
  for (uint64_t s = 0; s < 8; ++s) writes.push_back({kBlock + s * kSector, kSector});
  writes.push_back({3 * kBlock - kSector, 2 * kSector});                // blocks 2 and 3
  writes.push_back({kLine - 3 * kSector, 5 * kSector});                 // across lines 0 and 1
  writes.push_back({5 * kBlock + kSector, 2 * kBlock});                 // three blocks, partial at both ends
  writes.push_back({7 * kBlock + 3 * kSector, kSector});                // inside one block
  writes.push_back({20 * kLine + 7 * kSector, 3 * kBlock + kSector});   // lines not cached
  return writes;
}

class EngineAsyncEdgesTest : public ::testing::Test {
 protected:
  void Create(CacheMode mode) {
    config_.line_size = kLine;
    config_.mode = mode;
    config_.sequential_cutoff = 0;
    config_.background_cleaner = false;
    ASSERT_TRUE(rig_.Create(config_).ok());
    rig_.cache().CompleteOutOfOrder(true);
    rig_.origin().CompleteOutOfOrder(true);
  }
  // What the volume must hold: tag 1 over [0, bytes), tag 2 where written.
  void Expect(uint64_t bytes, const std::vector<Range>& writes) {
    want_ = AlignedBuffer(bytes);
    FillPattern(want_.data(), 0, bytes, 1);
    for (const Range& r : writes) FillPattern(want_.data() + r.offset, r.offset, r.length, 2);
  }
  // Every write at once on a reactor, each from its own place in a buffer
  // of tag 2.
  void WriteAllOnReactor(const std::vector<Range>& writes, bool fua, Completions& done) {
    AlignedBuffer data(want_.size());
    FillPattern(data.data(), 0, data.size(), 2);
    OnReactor([&] {
      for (size_t i = 0; i < writes.size(); ++i) {
        rig_.engine().WriteAsync(writes[i].offset, data.data() + writes[i].offset, writes[i].length, fua,
                                 done.at(i));
      }
    }, done, writes.size());
  }
  // Reads of odd ranges on a reactor, each compared with want_.
  void ExpectReadsOnReactor() {
    const std::vector<Range> reads = {{3 * kSector, 37 * kSector}, {kBlock + kSector, kSector},
                                      {kLine - kSector, 3 * kSector}, {20 * kLine, 5 * kBlock + kSector}};
    AlignedBuffer got(want_.size());
    Completions done(reads.size());
    OnReactor([&] {
      for (size_t i = 0; i < reads.size(); ++i) {
        rig_.engine().ReadAsync(reads[i].offset, got.data() + reads[i].offset, reads[i].length, done.at(i));
      }
    }, done, reads.size());
    EXPECT_EQ(done.failed(), 0u) << done.last_error();
    for (const Range& r : reads) {
      EXPECT_EQ(std::memcmp(got.data() + r.offset, want_.data() + r.offset, r.length), 0) << "at " << r.offset;
    }
  }
  ::testing::AssertionResult VolumeAsExpected() {
    AlignedBuffer got(want_.size());
    Status s = rig_.engine().Read(0, got.data(), got.size());
    if (!s.ok()) return ::testing::AssertionFailure() << s.ToString();
    for (uint64_t i = 0; i < got.size(); ++i) {
      if (got.data()[i] != want_.data()[i]) return ::testing::AssertionFailure() << "byte " << i << " differs";
    }
    return ::testing::AssertionSuccess();
  }
  static RigOptions Options() {
    RigOptions options;
    options.cache_data_size = 4 << 20;  // 256 lines
    return options;
  }
  EngineRig rig_{Options()};
  EngineConfig config_;
  AlignedBuffer want_;
};

TEST_F(EngineAsyncEdgesTest, SectorWritesToTheSameBlocksAllLandInWriteBack) {
  Create(CacheMode::kWriteBack);
  constexpr uint64_t kBytes = 24 * kLine;
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * kLine, 1).ok());  // cached, dirty
  AlignedBuffer rest(kBytes - 4 * kLine);
  FillPattern(rest.data(), 4 * kLine, rest.size(), 1);
  ASSERT_TRUE(rig_.raw_origin().Write(4 * kLine, rest.data(), rest.size()).ok());  // not cached
  const std::vector<Range> writes = SectorWrites();
  Expect(kBytes, writes);
  Completions done(writes.size());
  WriteAllOnReactor(writes, /*fua=*/false, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().requests_in_flight, 0u);
  ExpectReadsOnReactor();
  EXPECT_TRUE(VolumeAsExpected());
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  // Durable once synced, every sector.
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(VolumeAsExpected());
}

TEST_F(EngineAsyncEdgesTest, SectorWritesInWriteThroughReachTheOrigin) {
  Create(CacheMode::kWriteThrough);
  constexpr uint64_t kBytes = 24 * kLine;
  AlignedBuffer all(kBytes);
  FillPattern(all.data(), 0, kBytes, 1);
  ASSERT_TRUE(rig_.raw_origin().Write(0, all.data(), kBytes).ok());
  AlignedBuffer line(kLine);
  for (uint64_t i = 0; i < 2; ++i) ASSERT_TRUE(rig_.engine().Read(i * kLine, line.data(), kLine).ok());  // cached
  const std::vector<Range> writes = SectorWrites();
  Expect(kBytes, writes);
  Completions done(writes.size());
  WriteAllOnReactor(writes, /*fua=*/true, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 0u);
  ExpectReadsOnReactor();
  EXPECT_TRUE(VolumeAsExpected());
  EXPECT_TRUE(rig_.engine().CheckCleanDataForTest([](uint64_t) { return false; }).ok());
  // FUA: on the origin once answered.
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(VolumeAsExpected());
  AlignedBuffer origin(kBytes);
  ASSERT_TRUE(rig_.raw_origin().Read(0, origin.data(), kBytes).ok());
  EXPECT_EQ(std::memcmp(origin.data(), want_.data(), kBytes), 0);
}

// A write of partial blocks over several lines not cached, in a cache full
// of clean lines: each line needs a victim, which the reactor takes one line
// at a time, so the write runs again line by line there (the workers took
// it before), each line a read-modify-write of its own.
TEST_F(EngineAsyncEdgesTest, SectorWritesOverSeveralLinesIntoAFullCacheRunLineByLine) {
  Create(CacheMode::kWriteBack);
  constexpr uint64_t kBytes = 320 * kLine;
  AlignedBuffer all(kBytes);
  FillPattern(all.data(), 0, kBytes, 1);
  ASSERT_TRUE(rig_.raw_origin().Write(0, all.data(), kBytes).ok());
  ASSERT_TRUE(rig_.engine().Read(0, all.data(), 256 * kLine).ok());  // every slot, clean
  const std::vector<Range> writes = {{300 * kLine + kSector, 3 * kLine}, {310 * kLine - kSector, 2 * kSector}};
  Expect(kBytes, writes);
  Completions done(writes.size());
  WriteAllOnReactor(writes, /*fua=*/true, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().evictions, 6u);
  EXPECT_EQ(rig_.engine().stats().requests_in_flight, 0u);
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());  // FUA: durable
  EXPECT_TRUE(VolumeAsExpected());
}

// Whole blocks in memory unfit for direct I/O go through the request's own
// buffer, on the reactor.
TEST_F(EngineAsyncEdgesTest, BuffersUnfitForDirectIoAreServedOnTheReactor) {
  Create(CacheMode::kWriteBack);
  constexpr uint64_t kBytes = 4 * kBlock;
  std::vector<uint8_t> data(kBytes + 8), got(kBytes + 8);
  FillPattern(data.data() + 8, 0, kBytes, 3);
  Completions write(1), read(1);
  OnReactor([&] { rig_.engine().WriteAsync(0, data.data() + 8, kBytes, false, write.at(0)); }, write, 1);
  OnReactor([&] { rig_.engine().ReadAsync(0, got.data() + 8, kBytes, read.at(0)); }, read, 1);
  EXPECT_EQ(write.failed() + read.failed(), 0u);
  EXPECT_EQ(std::memcmp(got.data() + 8, data.data() + 8, kBytes), 0);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kBytes, 3));
}

// A cached partial block that fails its checksum is not merged: its bytes
// are read from the origin instead (it is clean), on the reactor, and the
// whole block written.
TEST_F(EngineAsyncEdgesTest, APartialBlockThatFailsItsChecksumIsReadFromTheOriginInstead) {
  Create(CacheMode::kWriteThrough);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, kLine, 1).ok());  // cached, clean
  ASSERT_TRUE(rig_.engine().Sync().ok());
  AlignedBuffer junk(1 << 20);
  std::memset(junk.data(), 0xA5, junk.size());
  ASSERT_TRUE(rig_.raw_cache().Write(kDataOffset, junk.data(), junk.size()).ok());
  const std::vector<Range> writes = {{kSector, kSector}};
  Expect(kLine, writes);
  Completions done(1);
  WriteAllOnReactor(writes, /*fua=*/false, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().errors.checksum_repaired, 1u);
  EXPECT_TRUE(VolumeAsExpected());
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

// A partial write over a dirty block the cache fails to read (only the
// cache holds its other sectors) fails once on the reactor, counted, and
// nothing changes (the workers used to read it again: a transient fault
// went unseen). Over a block on the origin whose read fails, the failed
// read is counted and the sent bytes go to the origin, on the reactor.
TEST_F(EngineAsyncEdgesTest, APartialWriteWhoseBlockCannotBeReadFailsOnceAndIsCounted) {
  Create(CacheMode::kWriteBack);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, kLine, 1).ok());  // cached, dirty
  AlignedBuffer origin(kLine);
  FillPattern(origin.data(), 8 * kLine, kLine, 1);
  ASSERT_TRUE(rig_.raw_origin().Write(8 * kLine, origin.data(), kLine).ok());
  Expect(9 * kLine, {});  // the writes' source buffer covers both
  rig_.cache().FailNth(kFaultRead, 1);
  const std::vector<Range> over_dirty = {{kSector, kSector}};
  Completions dirty(1);
  WriteAllOnReactor(over_dirty, /*fua=*/false, dirty);
  EXPECT_EQ(dirty.failed(), 1u);
  EXPECT_EQ(rig_.engine().stats().errors.cache_read, 1u);
  rig_.origin().FailNth(kFaultRead, 1);
  const std::vector<Range> over_origin = {{8 * kLine + kSector, kSector}};
  Completions uncached(1);
  WriteAllOnReactor(over_origin, /*fua=*/false, uncached);
  EXPECT_EQ(uncached.failed(), 0u) << uncached.last_error();
  EXPECT_EQ(rig_.engine().stats().errors.origin_read, 1u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kLine, 1));  // nothing changed
  EXPECT_TRUE(HasPattern(rig_.engine(), 8 * kLine, kSector, 1));
  EXPECT_TRUE(HasPattern(rig_.engine(), 8 * kLine + kSector, kSector, 2));
  EXPECT_TRUE(HasPattern(rig_.engine(), 8 * kLine + 2 * kSector, kLine - 2 * kSector, 1));
}

// A partial block whose origin read fails, in a write-through line whose
// other blocks are cached: the sent bytes go to the origin, the cached
// block the write covers whole takes them too, and the block not known is
// not cached; all on the reactor.
TEST_F(EngineAsyncEdgesTest, AWriteThroughWhosePartialBlockCannotBeReadWritesTheSentBytes) {
  Create(CacheMode::kWriteThrough);
  Expect(6 * kLine, {});
  ASSERT_TRUE(rig_.raw_origin().Write(0, want_.data(), want_.size()).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 4 * kLine, 3 * kBlock, 1).ok());  // blocks 0-2 of line 4 cached
  const std::vector<Range> writes = {{4 * kLine + 2 * kBlock, kBlock + kSector}};  // block 2, block 3's first sector
  Expect(6 * kLine, writes);
  rig_.origin().FailNth(kFaultRead, 1);
  Completions done(1);
  WriteAllOnReactor(writes, /*fua=*/false, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().errors.origin_read, 1u);
  ASSERT_TRUE(rig_.origin().Flush().ok());
  EXPECT_TRUE(rig_.OriginHasPattern(4 * kLine + 2 * kBlock, kBlock, 2));
  EXPECT_TRUE(rig_.OriginHasPattern(4 * kLine + 3 * kBlock, kSector, 2));
  EXPECT_TRUE(rig_.OriginHasPattern(4 * kLine + 3 * kBlock + kSector, kBlock - kSector, 1));
  const uint64_t hits = rig_.engine().stats().read_hits, misses = rig_.engine().stats().read_misses;
  EXPECT_TRUE(HasPattern(rig_.engine(), 4 * kLine + 2 * kBlock, kBlock, 2));
  EXPECT_EQ(rig_.engine().stats().read_hits, hits + 1) << "the cached block did not take the write";
  EXPECT_TRUE(VolumeAsExpected());
  EXPECT_GE(rig_.engine().stats().read_misses, misses + 1) << "the block not known stayed cached";
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

// Both partial blocks unknown: one on the origin whose read fails, one
// cached whose cache read fails. Neither is cached afterwards (the cached
// one held what a failed read left in the buffer).
TEST_F(EngineAsyncEdgesTest, AWriteThroughWithBothPartialBlocksUnreadCachesNeither) {
  Create(CacheMode::kWriteThrough);
  Expect(6 * kLine, {});
  ASSERT_TRUE(rig_.raw_origin().Write(0, want_.data(), want_.size()).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 4 * kLine + 2 * kBlock, 2 * kBlock, 1).ok());  // blocks 2-3 cached
  const std::vector<Range> writes = {{4 * kLine + kSector, 3 * kBlock}};  // block 0 from sector 1 to block 3's first
  Expect(6 * kLine, writes);
  rig_.origin().FailNth(kFaultRead, 1);
  rig_.cache().FailNth(kFaultRead, 1);
  Completions done(1);
  WriteAllOnReactor(writes, /*fua=*/false, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_TRUE(VolumeAsExpected());
  ASSERT_TRUE(rig_.origin().Flush().ok());
  EXPECT_TRUE(rig_.OriginHasPattern(4 * kLine + kSector, 3 * kBlock, 2));
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

// Over two lines, one holding dirty data and one whose partial block's
// origin read fails: each line goes its own way (its partial block read
// again), and the write lands.
TEST_F(EngineAsyncEdgesTest, AnUnreadPartialBlockBesideADirtyLineDoesNotFailTheWrite) {
  Create(CacheMode::kWriteBack);
  Expect(6 * kLine, {});
  ASSERT_TRUE(rig_.raw_origin().Write(0, want_.data(), want_.size()).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 5 * kLine, kBlock, 1).ok());  // line 5 dirty
  const std::vector<Range> writes = {{4 * kLine + kSector, kLine}};  // line 4 from sector 1, into line 5's block 0
  Expect(6 * kLine, writes);
  rig_.origin().FailNth(kFaultRead, 1);
  Completions done(1);
  WriteAllOnReactor(writes, /*fua=*/false, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_TRUE(VolumeAsExpected());
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

// The same in write-back over a dirty block, which must go to the cache
// with the partial one: the write fails on the reactor, nothing changes.
TEST_F(EngineAsyncEdgesTest, AWriteBackOverDirtyDataWhosePartialBlockCannotBeReadFails) {
  Create(CacheMode::kWriteBack);
  Expect(6 * kLine, {});
  ASSERT_TRUE(rig_.raw_origin().Write(0, want_.data(), want_.size()).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 4 * kLine, kBlock, 1).ok());  // block 0 of line 4 dirty
  rig_.origin().FailNth(kFaultRead, 1);
  Completions done(1);
  WriteAllOnReactor({{4 * kLine, kBlock + kSector}}, /*fua=*/false, done);  // block 0, block 1's first sector
  EXPECT_EQ(done.failed(), 1u);
  EXPECT_EQ(rig_.engine().stats().errors.origin_read, 1u);
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 1u);
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, 1u);
  EXPECT_TRUE(VolumeAsExpected());
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

// A request of partial blocks across a mebibyte of the volume is cut there,
// each part within the reactor's limit.
TEST_F(EngineAsyncEdgesTest, AnUnalignedMebibyteIsServedInParts) {
  Create(CacheMode::kWriteBack);
  constexpr uint64_t kBytes = 3 << 20;
  AlignedBuffer all(kBytes);
  FillPattern(all.data(), 0, kBytes, 1);
  ASSERT_TRUE(rig_.raw_origin().Write(0, all.data(), kBytes).ok());
  const std::vector<Range> writes = {{(1 << 20) - 3 * kSector, 1 << 20}};
  Expect(kBytes, writes);
  Completions done(1);
  WriteAllOnReactor(writes, /*fua=*/true, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().requests_in_flight, 0u);
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(VolumeAsExpected());
}

}  // namespace
}  // namespace cachecore::testing
