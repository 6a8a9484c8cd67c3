// The engine's asynchronous requests: hits served on the reactor with many
// cache reads in flight and completing in any order; misses, writes, trims
// and syncs on the workers; a cached block that fails its checksum repaired
// as the synchronous path does; and the same durability as Write and Sync.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "cachecore/devices/reactor.h"
#include "cachecore/metadata/superblock.h"
#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kBlock = 4096;

// Counts completions, where they ran and how they ended; Wait() blocks
// until `expected` have come.
class Completions {
 public:
  struct One final : EngineCompletion {
    Completions* owner = nullptr;
    void Done(Status status) override { owner->Record(status); }
  };
  explicit Completions(size_t n) : ones_(n) {
    for (One& o : ones_) o.owner = this;
  }
  EngineCompletion* at(size_t i) { return &ones_[i]; }
  void Record(const Status& s) {
    std::lock_guard lock(mu_);
    ++done_;
    if (!s.ok()) ++failed_, last_error_ = s.ToString();
    if (Reactor::Current() != nullptr) ++on_reactor_;
    cv_.notify_all();
  }
  void Wait(size_t expected) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_ >= expected; });
  }
  size_t count() { std::lock_guard lock(mu_); return done_; }
  size_t failed() { std::lock_guard lock(mu_); return failed_; }
  size_t on_reactor() { std::lock_guard lock(mu_); return on_reactor_; }
  std::string last_error() { std::lock_guard lock(mu_); return last_error_; }

 private:
  std::vector<One> ones_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t done_ = 0, failed_ = 0, on_reactor_ = 0;
  std::string last_error_;
};

struct FnTask final : ReactorTask {
  std::function<void()> fn;
  explicit FnTask(std::function<void()> f) : fn(std::move(f)) {}
  void Run() override { fn(); }
};

// Runs `submit` on a fresh reactor, then keeps the reactor running until
// `completions` has seen `expected` (they may arrive from workers too).
void OnReactor(const std::function<void()>& submit, Completions& completions, size_t expected) {
  auto reactor = Reactor::Create();
  ASSERT_TRUE(reactor.ok());
  Reactor* r = reactor.value().get();
  std::thread runner([r] { r->Run(); });
  FnTask task(submit);
  r->Post(&task);
  completions.Wait(expected);
  r->Stop();
  runner.join();
}

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

TEST_F(EngineAsyncTest, MissesGoToTheWorkersAndArePromoted) {
  AlignedBuffer data(kBlock);
  FillPattern(data.data(), 40 * kBlock, kBlock, 9);
  ASSERT_TRUE(rig_.raw_origin().Write(40 * kBlock, data.data(), kBlock).ok());
  AlignedBuffer got(kBlock);
  Completions done(1);
  OnReactor([&] { rig_.engine().ReadAsync(40 * kBlock, got.data(), kBlock, done.at(0)); }, done, 1);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(done.on_reactor(), 0u);
  EXPECT_EQ(std::memcmp(got.data(), data.data(), kBlock), 0);
  EXPECT_EQ(rig_.engine().stats().read_misses, 1u);
  // Promoted: the next read of it is a hit, on the reactor.
  Completions again(1);
  OnReactor([&] { rig_.engine().ReadAsync(40 * kBlock, got.data(), kBlock, again.at(0)); }, again, 1);
  EXPECT_EQ(again.on_reactor(), 1u);
  EXPECT_EQ(std::memcmp(got.data(), data.data(), kBlock), 0);
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
  EXPECT_EQ(done.on_reactor(), 0u);  // the workers read it again and repaired it
  AlignedBuffer want(4 * kBlock);
  FillPattern(want.data(), 0, 4 * kBlock, 5);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), 4 * kBlock), 0);
  EXPECT_GE(rig_.engine().stats().errors.checksum_repaired, 1u);
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

TEST_F(EngineAsyncTest, OffAReactorEverythingRunsOnTheWorkers) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, kBlock, 2).ok());
  AlignedBuffer got(kBlock);
  Completions done(2);
  rig_.engine().ReadAsync(0, got.data(), kBlock, done.at(0));
  rig_.engine().DiscardAsync(kBlock, kBlock, done.at(1));
  done.Wait(2);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(done.on_reactor(), 0u);
  AlignedBuffer want(kBlock);
  FillPattern(want.data(), 0, kBlock, 2);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), kBlock), 0);
  // A bad request fails at once, with the synchronous call's error.
  Completions bad(1);
  rig_.engine().ReadAsync(1, got.data(), kBlock, bad.at(0));
  EXPECT_EQ(bad.failed(), 1u);
}

}  // namespace
}  // namespace cachecore::testing
