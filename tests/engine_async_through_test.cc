// Requests that change the origin, served on the reactor: write-through
// (announcements grouped into one sync, lines cached), write-around and
// read-only (copies kept or dropped), an origin error, trims, and the crash
// rules they keep (a block never goes back in time, dropped data stays
// dropped).
#include <gtest/gtest.h>

#include <sys/prctl.h>

#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>

#include "cachecore/engine/steps.h"
#include "support/async_requests.h"
#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kLine = 16 * 1024;  // 4 blocks

class EngineAsyncThroughTest : public ::testing::Test {
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
  // Reads `lines` lines from line 0 through the cache (cached, clean), and
  // syncs: their records are stable, so a write over them announces.
  void CacheStable(uint64_t lines) {
    AlignedBuffer line(kLine);
    for (uint64_t i = 0; i < lines; ++i) ASSERT_TRUE(rig_.engine().Read(i * kLine, line.data(), kLine).ok());
    ASSERT_TRUE(rig_.engine().Sync().ok());
  }
  bool OriginHas(uint64_t offset, uint64_t length, uint32_t tag) {
    return rig_.OriginHasPattern(offset, length, tag);
  }
  EngineRig rig_;
  EngineConfig config_;
};

TEST_F(EngineAsyncThroughTest, WriteThroughWritesAreServedOnTheReactor) {
  Create(CacheMode::kWriteThrough);
  constexpr size_t kWrites = 16;  // a line each, half of them cached
  CacheStable(kWrites / 2);
  Completions done(kWrites);
  WriteOnReactor(rig_.engine(), 0, kWrites, 4, 2, false, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  ASSERT_TRUE(rig_.engine().Sync().ok());  // the origin's volatile cache, flushed
  EXPECT_TRUE(OriginHas(0, kWrites * kLine, 2));
  const StatsSnapshot after = rig_.engine().stats();
  EXPECT_EQ(after.write_hits, kWrites / 2 * 4);
  EXPECT_EQ(after.occupancy_lines, kWrites);  // the others cached now
  EXPECT_EQ(after.dirty_lines, 0u);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  EXPECT_TRUE(rig_.engine().CheckCleanDataForTest([](uint64_t) { return false; }).ok());
  // Read back from the cache, and after a cut (synced above).
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kWrites * kLine, 2));
  EXPECT_EQ(rig_.engine().stats().read_hits, kWrites * 4);
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kWrites * kLine, 2));
}

// Writes over stable clean blocks announce before the origin changes (a
// synced record each, rule 2): the committer syncs once for all of those
// that wait together, not once per write. (On the workers: 16 syncs.)
std::function<void(std::string_view)>* g_step = nullptr;
void RunStep(const char* step) { (*g_step)(step); }

TEST_F(EngineAsyncThroughTest, AnnouncementsShareSyncs) {
  Create(CacheMode::kWriteThrough);
  constexpr size_t kWrites = 16;
  CacheStable(kWrites);
  std::mutex mu;
  std::condition_variable cv;
  int syncs = 0;
  bool all_sent = false;
  // The first sync waits until every write was sent: the committer, on a
  // thread of its own, would otherwise sync each announcement alone
  // whenever it ran ahead of the reactor's loop (a slow machine).
  std::function<void(std::string_view)> step = [&](std::string_view name) {
    if (name != "sync-metadata-1-begun") return;
    std::unique_lock lock(mu);
    if (++syncs == 1) cv.wait(lock, [&] { return all_sent; });
  };
  g_step = &step;
  SetStepObserver(RunStep);
  const uint64_t bytes = 4 * kBlock;
  AlignedBuffer data(kWrites * bytes);
  FillPattern(data.data(), 0, kWrites * bytes, 3);
  Completions done(kWrites);
  OnReactor([&] {
    for (size_t i = kWrites; i-- > 0;) {
      rig_.engine().WriteAsync(i * bytes, data.data() + i * bytes, bytes, false, done.at(i));
    }
    std::lock_guard lock(mu);
    all_sent = true;
    cv.notify_all();
  }, done, kWrites);
  SetStepObserver(nullptr);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_GE(syncs, 1);
  EXPECT_LE(syncs, 4) << "writes that announced together each synced the store";
  // Announced, then written: after a cut each block reads the new data or,
  // had the origin lost it, never a stale cache copy vouched for as clean.
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kKeepUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kWrites * kLine, 3));
  EXPECT_TRUE(rig_.engine().CheckCleanDataForTest([](uint64_t) { return false; }).ok());
}

// Found by a review: the record announcing a write-through write was built
// by the committer, not with the marks; a sync that completed in between
// made the marked blocks stable again, so the "announcement" said clean,
// with the old checksum, while the origin took the new data. After a cut the
// block read the old data from the cache and the new one from the origin
// once evicted. Here the committer is held in a store sync (a trim's) while
// the write decides, a flush completes, and the power fails once the origin
// has the new data.
TEST_F(EngineAsyncThroughTest, AnAnnouncementIsBuiltWithItsMarks) {
  Create(CacheMode::kWriteThrough);
  CacheStable(1);
  std::mutex mu;
  std::condition_variable cv;
  bool committer_held = false, release = false;
  std::function<void(std::string_view)> step = [&](std::string_view name) {
    char thread[16] = {};
    prctl(PR_GET_NAME, thread, 0, 0, 0);
    std::unique_lock lock(mu);
    if (name == "sync-metadata-1-begun" && std::string_view(thread) == "cachectl-record" && !committer_held) {
      committer_held = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    } else if (name == "through-1-origin-written") {
      rig_.Freeze();  // the power fails: nothing after this reaches a device or the store
    }
  };
  g_step = &step;
  SetStepObserver(RunStep);
  auto reactor = Reactor::Create();
  ASSERT_TRUE(reactor.ok());
  Reactor* r = reactor.value().get();
  std::thread runner([r] { r->Run(); });
  Completions done(2);
  AlignedBuffer data(kBlock);
  FillPattern(data.data(), 0, kBlock, 9);
  FnTask trim([&] { rig_.engine().DiscardAsync(5 * kLine, kLine, done.at(0)); });  // the committer syncs
  r->Post(&trim);
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return committer_held; });
  }
  bool decided = false;
  FnTask write([&] {
    rig_.engine().WriteAsync(0, data.data(), kBlock, false, done.at(1));  // announces, waits for the committer
    std::lock_guard lock(mu);
    decided = true;
    cv.notify_all();
  });
  r->Post(&write);
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return decided; });
  }
  ASSERT_TRUE(rig_.engine().Sync().ok());  // a flush completes meanwhile
  {
    std::lock_guard lock(mu);
    release = true;
    cv.notify_all();
  }
  done.Wait(2);
  r->Stop();
  runner.join();
  SetStepObserver(nullptr);
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kKeepUnsynced).ok());
  // Never answered: old or new, but the same from the cache and, once
  // every dirty line is written back, from the origin.
  AlignedBuffer got(kBlock), origin(kBlock);
  ASSERT_TRUE(rig_.engine().Read(0, got.data(), kBlock).ok());
  ASSERT_TRUE(rig_.engine().Flush().ok());
  ASSERT_TRUE(rig_.raw_origin().Read(0, origin.data(), kBlock).ok());
  EXPECT_EQ(std::memcmp(got.data(), origin.data(), kBlock), 0) << "the cache and the origin disagree";
}

// Write-around keeps the cached copies up to date and caches nothing new;
// read-only drops the cached copies of what is written.
TEST_F(EngineAsyncThroughTest, WriteAroundAndReadOnlyWritesOnTheReactor) {
  Create(CacheMode::kWriteAround);
  CacheStable(2);
  Completions around(4);
  WriteOnReactor(rig_.engine(), 0, 4, 4, 4, false, around);  // lines 0-3
  EXPECT_EQ(around.failed(), 0u) << around.last_error();
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, 2u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * kLine, 4));  // promotes lines 2 and 3
  EXPECT_EQ(rig_.engine().stats().read_hits, 2 * 4u);
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kReadOnly).ok());
  Completions read_only(1);
  WriteOnReactor(rig_.engine(), 0, 1, 4, 5, false, read_only);  // line 0
  EXPECT_EQ(read_only.failed(), 0u) << read_only.last_error();
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, 3u);
  ASSERT_TRUE(rig_.engine().Sync().ok());
  EXPECT_TRUE(OriginHas(0, kLine, 5));
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kLine, 5));
}

// The origin fails the write: the write fails, and the cached copy, which
// may now be older than the origin, is dropped.
TEST_F(EngineAsyncThroughTest, AnOriginWriteErrorFailsTheWriteAndDropsTheCopy) {
  Create(CacheMode::kWriteThrough);
  CacheStable(1);
  rig_.origin().FailNth(kFaultWrite, 1);
  Completions done(1);
  WriteOnReactor(rig_.engine(), 0, 1, 4, 6, false, done);
  EXPECT_EQ(done.failed(), 1u);
  const StatsSnapshot after = rig_.engine().stats();
  EXPECT_EQ(after.errors.origin_write, 1u);
  EXPECT_EQ(after.occupancy_lines, 0u);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

// A FUA write-through write is durable on the origin once answered.
TEST_F(EngineAsyncThroughTest, AFuaWriteIsDurableWhenAnswered) {
  Create(CacheMode::kWriteThrough);
  CacheStable(1);
  Completions done(2);
  WriteOnReactor(rig_.engine(), 0, 2, 4, 7, true, done);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(OriginHas(0, 2 * kLine, 7));
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 2 * kLine, 7));
}

// A trim drops what it covers from the cache (dirty data too: it stays
// dropped across a cut) and trims the origin, on the reactor.
TEST_F(EngineAsyncThroughTest, TrimsAreServedOnTheReactor) {
  Create(CacheMode::kWriteBack);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * kLine, 1).ok());  // lines 0-3, dirty
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_EQ(rig_.engine().stats().dirty_lines, 4u);
  Completions done(2);
  OnReactor([&] {
    rig_.engine().DiscardAsync(0, 2 * kLine, done.at(0));           // lines 0 and 1, whole
    rig_.engine().DiscardAsync(2 * kLine + 512, 1024, done.at(1));  // part of one dirty block: kept
  }, done, 2);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  const StatsSnapshot after = rig_.engine().stats();
  EXPECT_EQ(after.occupancy_lines, 2u);
  EXPECT_EQ(after.dirty_lines, 2u);
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 2 * kLine, 2 * kLine, 1));
  // Answered: the drop is durable, the flushed dirty data never returns.
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, 2u);
  AlignedBuffer got(2 * kLine), old(2 * kLine);
  FillPattern(old.data(), 0, 2 * kLine, 1);
  ASSERT_TRUE(rig_.engine().Read(0, got.data(), 2 * kLine).ok());
  for (uint64_t b = 0; b < 2 * kLine / kBlock; ++b) {
    EXPECT_NE(std::memcmp(got.data() + b * kBlock, old.data() + b * kBlock, kBlock), 0) << "block " << b;
  }
  EXPECT_TRUE(HasPattern(rig_.engine(), 2 * kLine, 2 * kLine, 1));
}

// A rig of 4 KiB lines in write-back whose every request of 64 KiB or more
// bypasses the cache (sequential cutoff), or with a miss filter.
class EngineAsyncLineByLineTest : public ::testing::Test {
 protected:
  void Create(uint32_t admit_after_misses) {
    config_.line_size = kBlock;
    config_.mode = CacheMode::kWriteBack;
    config_.sequential_cutoff = 64 * 1024;
    config_.admit_after_misses = admit_after_misses;
    config_.background_cleaner = false;
    ASSERT_TRUE(rig_.Create(config_).ok());
    rig_.cache().CompleteOutOfOrder(true);
    rig_.origin().CompleteOutOfOrder(true);
  }
  EngineRig rig_;
  EngineConfig config_;
};

// A write that bypasses write-back over lines with dirty data: their blocks
// go to the cache (dirty data is only there, whatever the mode), the others
// around it, line by line on the reactor (the workers took it before).
TEST_F(EngineAsyncLineByLineTest, BypassingWritesOverDirtyLinesRunOnTheReactor) {
  Create(1);
  ASSERT_TRUE(WritePattern(rig_.engine(), 100 * kBlock, 4 * kBlock, 1).ok());  // dirty
  Completions done(1);
  AlignedBuffer data(32 * kBlock);
  FillPattern(data.data(), 90 * kBlock, data.size(), 2);
  OnReactor([&] {
    rig_.engine().WriteAsync(90 * kBlock, data.data(), data.size(), false, done.at(0));  // lines 90..121
  }, done, 1);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().bypassed, 1u);
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 4u);  // rewritten in the cache
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, 4u);  // nothing else cached
  EXPECT_TRUE(HasPattern(rig_.engine(), 90 * kBlock, 32 * kBlock, 2));
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  ASSERT_TRUE(rig_.engine().Sync().ok());  // out of the origin's volatile cache
  EXPECT_TRUE(rig_.OriginHasPattern(90 * kBlock, 10 * kBlock, 2));
  EXPECT_FALSE(rig_.OriginHasPattern(100 * kBlock, 4 * kBlock, 2));  // dirty in the cache
  ASSERT_TRUE(rig_.engine().Flush().ok());
  EXPECT_TRUE(rig_.OriginHasPattern(90 * kBlock, 32 * kBlock, 2));
  EXPECT_TRUE(rig_.engine().CheckCleanDataForTest([](uint64_t) { return false; }).ok());
}

// With a miss filter (a line is cached on its second miss), write-back
// writes to lines not cached run line by line on the reactor, each line
// admitted or written around the cache on its own (the workers took every
// such write before); each miss is counted once.
TEST_F(EngineAsyncLineByLineTest, WritesWithAMissFilterRunLineByLineOnTheReactor) {
  Create(2);
  Completions first(1), second(1);
  WriteOnReactor(rig_.engine(), 200, 1, 8, 4, false, first);
  EXPECT_EQ(first.failed(), 0u) << first.last_error();
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, 0u);  // first misses: around the cache
  WriteOnReactor(rig_.engine(), 200, 1, 8, 5, false, second);
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, 8u);  // second misses: cached
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 8u);
  EXPECT_EQ(rig_.engine().stats().bypassed_no_space, 0u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 200 * kBlock, 8 * kBlock, 5));
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

}  // namespace
}  // namespace cachecore::testing
