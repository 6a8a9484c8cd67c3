// Interleavings that lost flushed data, forced deterministically: each test
// runs a second request (or a device's own write-back) at a named step of
// the engine, on the engine's thread, then cuts the power. Found by reading
// the code (issue 13); each failed before its fix.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "support/stamped_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kLines = 256;  // what the rig's 1 MiB cache holds at 4 KiB lines

class RaceTest : public ::testing::TestWithParam<PowerCutMode> {
 protected:
  void SetUp() override {
    config_.line_size = 4096;
    config_.background_cleaner = false;
    config_.sequential_cutoff = 0;  // the fills below are sequential
  }
  void TearDown() override { ClearStepAction(); }

  void Cut() {
    ClearStepAction();
    Status s = rig_.PowerCutAndReopen(config_, GetParam());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Line 0 holds write 1 under a durable, stable kClean record (written
  // back and cleaned), then leaves the cache: reads of every other line
  // fill the cache, and the policy picks line 0, the oldest, as the first
  // victim. The delete of its record is in the store, not yet synced. The
  // cache runs in `mode` from the fill on. With `recache`, a read brings
  // line 0 back, into another slot, and proves it was gone.
  void EvictLineZero(CacheMode mode, bool recache) {
    config_.mode = CacheMode::kWriteBack;
    ASSERT_TRUE(rig_.Create(config_).ok());
    rig_.WriteStamped(0, 1);
    ASSERT_TRUE(rig_.engine().Flush().ok());
    ASSERT_TRUE(rig_.engine().SetMode(mode).ok());
    config_.mode = mode;
    for (uint64_t line = 1; line <= kLines; ++line) rig_.ReadStamped(line);
    ASSERT_EQ(rig_.engine().stats().evictions, 1u);
    if (!recache) return;
    const uint64_t misses = rig_.engine().stats().read_misses;
    EXPECT_EQ(rig_.ReadStamped(0), 1u);
    ASSERT_EQ(rig_.engine().stats().read_misses, misses + 1) << "line 0 was not evicted";
  }

  StampedRig rig_;
  EngineConfig config_;
};

// Race 1: a slot freed by a trim was handed to another line before the
// trim's delete of its record reached the store; the late delete then
// removed the new line's record, and a flushed write came back as never
// written.
TEST_P(RaceTest, SlotIsNotReusedBeforeItsRecordIsDeleted) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(0, 1);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  // Line 1 hashes to another stripe than line 0, so the write runs while
  // the trim holds line 0's.
  OnStepOnce("release-1-emptied", [&] { rig_.WriteStamped(1, 2); });
  ASSERT_TRUE(rig_.engine().Discard(0, 4096).ok());
  ASSERT_TRUE(rig_.engine().Sync().ok());
  Cut();
  EXPECT_EQ(rig_.ReadStamped(1), 2u);
}

// Race 2: a block written before a sync began, rewritten while that sync
// runs: the sync promises the older data, so the rewrite must announce
// itself like any rewrite of flushed data.
TEST_P(RaceTest, RewriteDuringASyncKeepsTheSyncedData) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(2, 1);
  OnStepOnce("sync-2-devices-flushed", [&] { rig_.WriteStamped(2, 2); });
  ASSERT_TRUE(rig_.engine().Sync().ok());
  Cut();
  uint64_t got = rig_.ReadStamped(2);
  EXPECT_TRUE(got == 1 || got == 2) << "block 2 holds write " << got;
}

// Race 3, write-through: the line, evicted and cached again in another
// slot, is written; the origin takes the new data (and its disk writes it
// back on its own) before the eviction is synced. The old slot's stable
// clean record must not survive the cut while the origin has moved on.
TEST_P(RaceTest, WriteThroughAfterRecachingSyncsTheEviction) {
  EvictLineZero(CacheMode::kWriteThrough, /*recache=*/true);
  rig_.WriteStamped(0, 2);
  ASSERT_TRUE(rig_.origin().Flush().ok());  // a disk may write back its cache at any time
  Cut();
  uint64_t first = rig_.ReadStamped(0);
  EXPECT_TRUE(first == 1 || first == 2) << first;
  EXPECT_EQ(rig_.OriginStampedAfterDetach(0), first) << "the cache served an older copy";
}

// Race 3, the cleaner: the same with a write-back write cleaned to the
// origin, the power going after the origin's flush.
TEST_P(RaceTest, CleanerSyncsAnEvictionOfTheLinesItWrites) {
  EvictLineZero(CacheMode::kWriteBack, /*recache=*/true);
  rig_.WriteStamped(0, 2);
  OnStepOnce("flush-2-origin-synced", [&] { rig_.Freeze(); });
  EXPECT_FALSE(rig_.engine().Flush().ok());  // the power went at that step
  Cut();
  uint64_t first = rig_.ReadStamped(0);
  EXPECT_TRUE(first == 1 || first == 2) << first;
  EXPECT_EQ(rig_.OriginStampedAfterDetach(0), first) << "the cache served an older copy";
}

// Race 3, a sync in flight: the list of unsynced evictions was emptied when
// a metadata sync began, so a write-through write meanwhile skipped the
// sync of its line's eviction and reached the origin before it.
TEST_P(RaceTest, EvictionStaysListedUntilItsSyncCompletes) {
  EvictLineZero(CacheMode::kWriteThrough, /*recache=*/false);  // as the tests above prove, line 0 is the victim
  // The write runs on a thread of its own: the sync may run on the thread
  // that syncs for every request (the record committer), which the write
  // may wait for. Either it writes the origin or it waits for a sync;
  // then the power goes, before the sync that began completes.
  std::mutex mu;
  std::condition_variable cv;
  bool written_or_waiting = false;
  auto settled = [&] {
    std::lock_guard lock(mu);
    written_or_waiting = true;
    cv.notify_all();
  };
  std::thread writer;
  OnStepOnce("through-0-waits-for-sync", settled);
  OnStepOnce("through-1-origin-written", settled);
  OnStepOnce("sync-metadata-1-begun", [&] {
    writer = std::thread([&] {
      AlignedBuffer b2(4096);
      for (uint64_t s = 0; s < 8; ++s) StampSector(b2.data() + s * 512, 2, s);
      (void)rig_.engine().Write(0, b2.data(), 4096, false);  // fails if it waited: the power went
      settled();
    });
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return written_or_waiting; });
    ASSERT_TRUE(rig_.origin().Flush().ok());
    rig_.Freeze();
  });
  // A trim elsewhere syncs the metadata (without a cache flush, which
  // would make the reuse of line 0's old slot durable and hide the race).
  (void)rig_.engine().Discard(300 * 4096, 4096);
  ASSERT_TRUE(writer.joinable()) << "the trim did not sync the metadata";
  writer.join();
  Cut();
  uint64_t first = rig_.ReadStamped(0);
  EXPECT_TRUE(first == 1 || first == 2) << first;
  EXPECT_EQ(rig_.OriginStampedAfterDetach(0), first) << "the cache served an older copy";
}

// Race 5: a block written back over stable clean data needs its older
// record made non-vouching (synced) before the origin takes it (rule 3).
// The cleaner ignored a failed sync there: with a cache device that cannot
// flush, the power going after the origin's flush left the older data
// served under its stable clean record while the origin held the newer.
TEST_P(RaceTest, FailedCacheSyncBeforeCleaningStillProtectsTheOlderRecord) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(5, 1);
  ASSERT_TRUE(rig_.engine().Flush().ok());  // cleaned: a durable, stable kClean record
  rig_.WriteStamped(5, 2);  // written back over it, unannounced
  rig_.cache().FailAlways(kFaultFlush);
  OnStepOnce("flush-2-origin-synced", [&] { rig_.Freeze(); });
  EXPECT_FALSE(rig_.engine().Flush().ok());
  Cut();
  uint64_t first = rig_.ReadStamped(5);
  EXPECT_TRUE(first == 1 || first == 2) << first;
  EXPECT_EQ(rig_.OriginStampedAfterDetach(5), first) << "the cache served an older copy";
}

// Found reviewing the fixes above (each failed before its own fix): a
// dirty block announced as kDirtyOverwritten (any 4 KiB there is accepted)
// while the sync that promises it had not flushed it yet. The slot's
// flushed content was another line's; here the sync's cache flush fails.
TEST_P(RaceTest, AnnouncementWaitsForTheDataItPromises) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(7, 1);  // line 7 -> slot S
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_TRUE(rig_.engine().Discard(7 * 4096, 4096).ok());  // S freed
  rig_.WriteStamped(9, 1);  // line 9 -> slot S, fresh, unflushed
  rig_.cache().FailAlways(kFaultFlush);
  OnStepOnce("sync-2-devices-flushed", [&] {
    AlignedBuffer b2(4096);
    for (uint64_t s = 0; s < 8; ++s) StampSector(b2.data() + s * 512, 2, 9 * 8 + s);
    (void)rig_.engine().Write(9 * 4096, b2.data(), 4096, false);  // fails: the flush fails
  });
  EXPECT_FALSE(rig_.engine().Sync().ok());
  rig_.cache().ClearFaults();
  Cut();
  uint64_t got = rig_.ReadStamped(9);
  EXPECT_TRUE(got == 0 || got == 1 || got == 2) << "block 9 holds " << got;
}

// A stable clean block invalidated without a sync (a transient cache read
// error) kept its durable kClean record; a write-back write over the now
// invalid block was not flagged as over clean data, and the cleaner wrote
// the origin with no sync first (rule 3).
TEST_P(RaceTest, InvalidatedStableCleanBlockIsSyncedBeforeItIsRewritten) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(5, 1);
  ASSERT_TRUE(rig_.engine().Flush().ok());  // cleaned: durable, stable kClean
  rig_.cache().FailNth(kFaultRead, 1);
  EXPECT_EQ(rig_.ReadStamped(5), 1u);  // read error: the block leaves the cache
  rig_.WriteStamped(5, 2);
  OnStepOnce("flush-2-origin-synced", [&] { rig_.Freeze(); });
  EXPECT_FALSE(rig_.engine().Flush().ok());
  Cut();
  uint64_t first = rig_.ReadStamped(5);
  EXPECT_TRUE(first == 1 || first == 2) << first;
  EXPECT_EQ(rig_.OriginStampedAfterDetach(5), first) << "the cache served an older copy";
}

// A cache write that fails over to the origin over a block written back
// over stable clean data: rule 3 holds there as in the cleaner.
TEST_P(RaceTest, CacheWriteFailingOverToTheOriginKeepsRule3) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(5, 1);
  ASSERT_TRUE(rig_.engine().Flush().ok());  // durable, stable kClean
  rig_.WriteStamped(5, 2);                  // over it: unannounced
  rig_.cache().FailNth(kFaultWrite, 1);     // the next cache write fails
  OnStepOnce("release-1-emptied", [&] { rig_.Freeze(); });  // after the origin's flush
  AlignedBuffer buf(4096);
  for (uint64_t s = 0; s < 8; ++s) StampSector(buf.data() + s * 512, 3, 5 * 8 + s);
  EXPECT_FALSE(rig_.engine().Write(5 * 4096, buf.data(), 4096, false).ok());
  Cut();
  uint64_t first = rig_.ReadStamped(5);
  EXPECT_TRUE(first == 1 || first == 2 || first == 3) << first;
  EXPECT_EQ(rig_.OriginStampedAfterDetach(5), first) << "the cache served an older copy";
}

// Found by the concurrent crash model (failures in an hour's loop, seeds
// 17706990, 985635874, 362090879): a write-back write over dirty data
// decided it needed no announcement (no sync had begun since that data was
// written); then a sync began, promising that older data, and flushed the
// cache before the write's data landed (or completed before it), while the
// write's fresh record, durable without its data (or over the promised data
// it replaced), made recovery drop the block: the origin's older copy came
// back. Now a sync that begins while a write-back write holds its epoch
// waits for it, and covers it whole. The writer goes on here once the sync
// has begun and waits for it; an engine without that wait let it go on
// once the sync had flushed the devices (`at`: "sync-2-devices-flushed",
// the store synced after the record) or had completed (nothing).

// Opened once, waited on by any number of threads.
class Latch {
 public:
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

void WriteWithSyncBeginningAt(StampedRig& rig, const char* writer_step, const char* sync_held_at,
                              uint64_t block, uint64_t blocks, uint64_t id) {
  Latch writer_may_go, record_put;
  std::thread sync;
  OnStepOnce("sync-1-epoch-begun", [&] { writer_may_go.Open(); });  // the sync's thread
  if (sync_held_at) {
    OnStepOnce(sync_held_at, [&] {
      writer_may_go.Open();
      record_put.Wait();
    });
  }
  OnStepOnce(writer_step, [&] {  // the writer's thread
    sync = std::thread([&] {
      EXPECT_TRUE(rig.engine().Sync().ok());
      writer_may_go.Open();
    });
    writer_may_go.Wait();
  });
  AlignedBuffer data(blocks * 4096);
  for (uint64_t s = 0; s < blocks * 8; ++s) StampSector(data.data() + s * 512, id, block * 8 + s);
  EXPECT_TRUE(rig.engine().Write(block * 4096, data.data(), blocks * 4096, false).ok());
  record_put.Open();
  sync.join();
  ClearStepAction();
}

void ExpectOneOf(StampedRig& rig, uint64_t block, std::initializer_list<uint64_t> allowed) {
  const uint64_t got = rig.ReadStamped(block);
  EXPECT_NE(std::find(allowed.begin(), allowed.end(), got), allowed.end())
      << "block " << block << " holds " << got << " after a sync promised 1";
}

TEST_P(RaceTest, SyncFlushingMidWriteKeepsTheDataItPromises) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(5, 1);  // dirty, written before the sync begins: it promises it
  WriteWithSyncBeginningAt(rig_, "write-back-1-decided", "sync-2-devices-flushed", 5, 1, 2);
  Cut();
  ExpectOneOf(rig_, 5, {1, 2});
}

TEST_P(RaceTest, SyncCompletingMidWriteKeepsTheDataItPromises) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(5, 1);
  WriteWithSyncBeginningAt(rig_, "write-back-1-decided", nullptr, 5, 1, 2);
  Cut();
  ExpectOneOf(rig_, 5, {1, 2});
}

// And a later write to the block, before the next sync: it must announce
// what that sync covered.
TEST_P(RaceTest, WriteAfterASyncThatBeganMidWriteAnnounces) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(5, 1);
  WriteWithSyncBeginningAt(rig_, "write-back-1-decided", "sync-2-devices-flushed", 5, 1, 2);
  rig_.WriteStamped(5, 3);
  Cut();
  ExpectOneOf(rig_, 5, {2, 3});  // the sync covered 2 whole
}

// The same through the batch path (a write over two lines).
TEST_P(RaceTest, SyncFlushingMidBatchWriteKeepsTheDataItPromises) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(5, 1);
  rig_.WriteStamped(6, 1);
  WriteWithSyncBeginningAt(rig_, "write-back-1-decided", "sync-2-devices-flushed", 5, 2, 2);
  Cut();
  for (uint64_t block : {5, 6}) ExpectOneOf(rig_, block, {1, 2});
}

TEST_P(RaceTest, SyncCompletingMidBatchWriteKeepsTheDataItPromises) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(5, 1);
  rig_.WriteStamped(6, 1);
  WriteWithSyncBeginningAt(rig_, "write-back-1-decided", nullptr, 5, 2, 2);
  Cut();
  for (uint64_t block : {5, 6}) ExpectOneOf(rig_, block, {1, 2});
}

// A batch that decides its announcements after a sync began: it must not
// announce kDirtyOverwritten (any 4 KiB accepted) for data that sync has not
// flushed; here the power fails before the data is written. The slot's
// flushed content is another line's.
TEST_P(RaceTest, BatchDecidingAfterASyncBeganAnnouncesNothingUnflushed) {
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  rig_.WriteStamped(7, 1);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_TRUE(rig_.engine().Discard(7 * 4096, 4096).ok());
  rig_.WriteStamped(9, 1);  // line 9 -> line 7's old slot, fresh, unflushed
  Latch sync_waits;
  std::thread sync;
  OnStepOnce("sync-1-epoch-begun", [&] { sync_waits.Open(); });
  OnStepOnce("write-back-0-epoch-held", [&] {
    sync = std::thread([&] { (void)rig_.engine().Sync(); });
    sync_waits.Wait();
  });
  OnStepOnce("write-back-1-decided", [&] { rig_.Freeze(); });
  AlignedBuffer data(2 * 4096);
  for (uint64_t s = 0; s < 16; ++s) StampSector(data.data() + s * 512, 2, 8 * 8 + s);
  (void)rig_.engine().Write(8 * 4096, data.data(), 2 * 4096, false);
  sync.join();
  Cut();
  ExpectOneOf(rig_, 9, {0, 1, 2});
}

// Race 14 (the concurrent crash model's one failure in session 8, seed
// 763227300): a write-through write whose partial edge block is a clean
// block failing its checksum (its cache copy lost in a cut) repaired it,
// and so put and synced the line's whole record, between the write's
// announcement and its own record. A sync that began after the write read
// its flush epoch and completed meanwhile had made the write's other
// blocks stable in memory with their old data: that record called the old
// cache data clean while the origin held the new. After a cut the block
// read the old write from the cache and the new one once the cache was
// gone.
TEST_P(RaceTest, ThroughWriteRepairingAnEdgeKeepsCleanBlocksOnTheOrigin) {
  config_.line_size = 65536;
  config_.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig_.Create(config_).ok());
  auto write_sectors = [&](uint64_t first, uint64_t count, uint64_t id) {
    AlignedBuffer b(count * 512);
    for (uint64_t i = 0; i < count; ++i) StampSector(b.data() + i * 512, id, first + i);
    Status s = rig_.engine().Write(first * 512, b.data(), count * 512, false);
    ASSERT_TRUE(s.ok()) << s.ToString();
  };
  auto clean_data = [&] { return rig_.engine().CheckCleanDataForTest([](uint64_t) { return false; }); };
  write_sectors(8, 16, 1);  // blocks 1 and 2: written back, cleaned, stable
  ASSERT_TRUE(rig_.engine().Flush().ok());
  // Block 0: cleaned and durably marked clean, then the power goes before
  // the cache device flushed its copy (a clean block failing its checksum).
  write_sectors(0, 8, 2);
  OnStepOnce("flush-3-marked-clean", [&] { rig_.Freeze(); });
  EXPECT_FALSE(rig_.engine().Flush().ok());
  ClearStepAction();
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  ASSERT_TRUE(clean_data().ok());
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteThrough).ok());
  config_.mode = CacheMode::kWriteThrough;
  // Write 3 through, from the middle of block 0 to the end of block 2; a
  // client's sync runs whole right after its origin write.
  OnStepOnce("through-1-origin-written", [&] { EXPECT_TRUE(rig_.engine().Sync().ok()); });
  write_sectors(4, 20, 3);
  Cut();
  Status clean = clean_data();
  EXPECT_TRUE(clean.ok()) << clean.ToString();
  const uint64_t now = rig_.ReadStamped(1);
  EXPECT_TRUE(now == 1 || now == 3) << now;
  EXPECT_EQ(rig_.OriginStampedAfterDetach(1), now)
      << "block 1 read one write through the cache and another once the cache was gone";
}

INSTANTIATE_TEST_SUITE_P(PowerCutModes, RaceTest,
                         ::testing::Values(PowerCutMode::kDropUnsynced, PowerCutMode::kTear,
                                           PowerCutMode::kKeepUnsynced),
                         [](const auto& info) { return PowerCutModeName(info.param); });

}  // namespace
}  // namespace cachecore::testing
