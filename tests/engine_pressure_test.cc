// Write-back under pressure, in a whole engine (memory devices, a real
// RocksDB store), the background cleaner's ticks driven by the test with
// the time they stand for (Engine::RunCleanerTickForTest), so everything is
// counted, nothing timed: dirty lines converge to the target under a steady
// write rate; the cleaner backs off while clients' requests wait at the
// origin (held in the fault device's queue) and runs flat out past the low
// watermark whatever the origin does; writers
// past the high watermark are slowed, never failed, on the synchronous
// path and on a reactor alike.
#include <gtest/gtest.h>

#include "support/async_requests.h"
#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kLines = 1024;  // of 4 KiB

// Client reads of blocks never cached, submitted on a reactor of their own
// and kept in the origin's queue (the fault device holds them) until
// Release: a disk busy with the clients' work, `n` requests deep.
class HeldReads {
 public:
  HeldReads(Engine& engine, FaultDevice& origin, uint64_t at, size_t n)
      : origin_(origin), n_(n), done_(n), got_(n * kBlock) {
    auto reactor = Reactor::Create();
    if (!reactor.ok()) return;
    reactor_ = std::move(reactor.value());
    runner_ = std::thread([r = reactor_.get()] { r->Run(); });
    origin_.HoldRequests(true);
    submit_ = std::make_unique<FnTask>([this, &engine, at] {
      for (size_t i = 0; i < n_; ++i) engine.ReadAsync(at + i * kBlock, got_.data() + i * kBlock, kBlock, done_.at(i));
    });
    reactor_->Post(submit_.get());
  }
  ~HeldReads() { (void)Release(); }
  // Whether all of them reached the origin's queue (waits up to a minute).
  bool AllWaiting() {
    for (int i = 0; i < 60000 && origin_.queue_depth() < n_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return reactor_ != nullptr && origin_.queue_depth() == n_;
  }
  // Lets them run; true when each returned the origin's zeros.
  bool Release() {
    if (reactor_ == nullptr) return false;
    origin_.HoldRequests(false);
    done_.Wait(n_);
    reactor_->Stop();
    runner_.join();
    reactor_.reset();
    for (size_t b = 0; b < n_ * kBlock; ++b) {
      if (got_.data()[b] != 0) return false;
    }
    return done_.failed() == 0;
  }

 private:
  FaultDevice& origin_;
  const size_t n_;
  Completions done_;
  AlignedBuffer got_;
  std::unique_ptr<Reactor> reactor_;
  std::thread runner_;
  std::unique_ptr<FnTask> submit_;
};

class PressureTest : public ::testing::Test {
 protected:
  PressureTest() : rig_(Options()) {}
  static RigOptions Options() {
    RigOptions o;
    o.origin_size = 64 << 20;
    o.cache_data_size = kLines * kBlock;
    return o;
  }
  void SetUp() override {
    config_.line_size = kBlock;
    config_.mode = CacheMode::kWriteBack;
    config_.sequential_cutoff = 0;
    config_.background_cleaner = false;  // the test runs its ticks
    ASSERT_TRUE(rig_.Create(config_).ok());
    ASSERT_EQ(rig_.engine().capacity_lines(), kLines);
  }
  void TearDown() override {
    if (rig_.has_engine()) {
      EXPECT_TRUE(rig_.engine().Shutdown().ok());
    }
  }
  // Writes `n` lines not written before, one request each.
  void WriteNewLines(uint64_t n) {
    for (uint64_t i = 0; i < n; ++i, ++next_line_) {
      ASSERT_TRUE(WritePattern(rig_.engine(), next_line_ * kBlock, kBlock, 7).ok());
    }
  }
  // Reads `n` blocks never written (misses: the origin's zeros).
  void ReadUncached(uint64_t n) {
    AlignedBuffer got(kBlock);
    for (uint64_t i = 0; i < n; ++i, miss_at_ += kBlock) {
      ASSERT_TRUE(rig_.engine().Read(miss_at_, got.data(), kBlock).ok());
      for (size_t b = 0; b < kBlock; ++b) ASSERT_EQ(got.data()[b], 0) << miss_at_ + b;
    }
  }
  uint64_t Dirty() { return rig_.engine().stats().dirty_lines; }
  uint64_t Tick(double seconds) {
    Result<uint64_t> r = rig_.engine().RunCleanerTickForTest(seconds);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r.value() : 0;
  }
  std::string State() { return rig_.engine().stats().cleaner_state; }

  EngineRig rig_;
  EngineConfig config_;
  uint64_t next_line_ = 0;
  uint64_t miss_at_ = 32 << 20;
};

TEST_F(PressureTest, DirtyLinesConvergeToTheTargetUnderASteadyWriteRate) {
  // 50 new dirty lines a second (5 % of the cache), ticks of 100 ms, passes
  // of 16 lines: after a minute of them the dirty lines stay between the
  // 10 % target and a pass and a tick's writes above it (2 % of the cache
  // either side), and every line reads back.
  ASSERT_TRUE(rig_.engine().SetCleaner({.dirty_target_pct = 10, .dirty_high_pct = 60,
                                        .dirty_low_pct = 40, .batch_lines = 16}).ok());
  for (int i = 0; i < 600; ++i) {
    WriteNewLines(5);
    Tick(0.1);
  }
  for (int i = 0; i < 50; ++i) {
    WriteNewLines(5);
    EXPECT_GE(double(Dirty()), 0.08 * kLines);
    EXPECT_LE(double(Dirty()), 0.12 * kLines + 16 + 5);
    Tick(0.1);
  }
  EXPECT_EQ(State(), "controlled");
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, next_line_ * kBlock, 7));
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

TEST_F(PressureTest, TheCleanerBacksOffWhileClientRequestsWaitAtTheOrigin) {
  WriteNewLines(kLines * 30 / 100);  // 30 %: between the target and the low watermark
  const uint64_t dirty = Dirty();
  // Two client reads wait at the origin the whole second: a queue depth of
  // two, from no more than two requests (a slow disk, not a busy rate).
  HeldReads reads(rig_.engine(), rig_.origin(), miss_at_, 2);
  ASSERT_TRUE(reads.AllWaiting());
  Tick(0);  // the meter's interval starts with them waiting
  const uint64_t while_busy = Tick(1.0);
  EXPECT_EQ(State(), "backing off");
  // A trickle: one 64-line batch every ten seconds (none in the first).
  EXPECT_LE(while_busy, 7u);
  EXPECT_EQ(Dirty(), dirty - while_busy);
  ASSERT_TRUE(reads.Release());  // and they return the right data
  // A quiet second, the queue empty: the controller's rate (the excess
  // over four seconds).
  Tick(0);
  const uint64_t quiet = Tick(1.0);
  EXPECT_EQ(State(), "controlled");
  EXPECT_GE(quiet, (dirty - kLines / 10) / 4 - 8);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, next_line_ * kBlock, 7));
}

TEST_F(PressureTest, ManyRequestsAnsweredAtOnceDoNotMakeTheOriginBusy) {
  // An origin with room to spare (here memory: every read answered at
  // once) is not busy however many requests it serves: the queue, not the
  // rate, says when the cleaner would get in the clients' way.
  WriteNewLines(kLines * 30 / 100);
  ReadUncached(400);
  EXPECT_GT(Tick(1.0), 7u);
  EXPECT_EQ(State(), "controlled");
}

TEST_F(PressureTest, MissesAndWritesFindTheCleanLinesWhereverTheyLieInThePolicysOrder) {
  // All dirty but the 20 lines read last: clean, the newest, at the far end
  // of the policy's order from its next victims (as the reserve the
  // cleaner keeps lies anywhere in it: it cleans in origin order).
  WriteNewLines(kLines - 20);
  ReadUncached(20);
  ASSERT_EQ(Dirty(), kLines - 20);
  const uint64_t origin_writes = rig_.origin().operations(kFaultWrite | kFaultFlush);
  // Ten misses and five new writes each take one of them: nothing goes
  // around the cache, nothing is cleaned.
  ReadUncached(10);
  WriteNewLines(5);
  const auto st = rig_.engine().stats();
  EXPECT_EQ(st.bypassed_no_space, 0u);
  EXPECT_EQ(st.evictions, 15u);
  EXPECT_EQ(Dirty(), kLines - 15);
  EXPECT_EQ(rig_.origin().operations(kFaultWrite | kFaultFlush), origin_writes);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, next_line_ * kBlock, 7));
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

TEST_F(PressureTest, StatsShowTheBytesCleanedOverTheLastSecond) {
  EXPECT_EQ(rig_.engine().stats().writeback_rate_bytes, 0u);
  WriteNewLines(kLines * 30 / 100);
  const uint64_t cleaned = Tick(1.0);
  ASSERT_GT(cleaned, 0u);
  // The rate covers wall time, not the ticks' (a flat-out tick may clean
  // for many seconds): once a second has passed since the engine started
  // (by this tick already on a slow machine, else by the next), a tick
  // shows what was cleaned since, per second of it.
  const uint64_t first = rig_.engine().stats().writeback_rate_bytes;
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  Tick(0);
  const uint64_t rate = std::max(first, rig_.engine().stats().writeback_rate_bytes);
  EXPECT_GT(rate, 0u);
  EXPECT_LE(rate, cleaned * kBlock);  // over a second or more
  // Two seconds more without a tick (a pass that long, or the cleaner
  // stopped): nothing was cleaned since, and stats say so, not the last
  // figure.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_EQ(rig_.engine().stats().writeback_rate_bytes, 0u);
}

TEST_F(PressureTest, WithoutTheBackgroundCleanerTheRateStaysZero) {
  // Replay and tools run no cleaner: only Flush cleans, and no tick sets a
  // rate, so none is made up from the time since the engine started.
  WriteNewLines(20);
  ASSERT_TRUE(rig_.engine().Flush().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_EQ(rig_.engine().stats().writeback_rate_bytes, 0u);
  EXPECT_EQ(Dirty(), 0u);
}

TEST_F(PressureTest, ClientSyncsAloneDoNotMakeTheOriginBusy) {
  // A database in write-back: its writes stay in the cache, its syncs reach
  // the origin as flushes only. The cleaner must not back off for them.
  WriteNewLines(kLines * 30 / 100);
  for (int i = 0; i < 40; ++i) {
    WriteNewLines(1);
    ASSERT_TRUE(rig_.engine().Sync().ok());
  }
  EXPECT_GT(Tick(1.0), 7u);
  EXPECT_EQ(State(), "controlled");
}

TEST_F(PressureTest, PastTheLowWatermarkTheCleanerRunsFlatOutEvenWithTheOriginBusy) {
  WriteNewLines(kLines * 30 / 100);
  HeldReads reads(rig_.engine(), rig_.origin(), miss_at_, 2);
  ASSERT_TRUE(reads.AllWaiting());
  Tick(0);
  Tick(1.0);
  EXPECT_EQ(State(), "backing off");
  WriteNewLines(kLines / 5);  // 50 %, the low watermark is 40 %
  Tick(0.1);
  EXPECT_EQ(State(), "flat out");
  ASSERT_TRUE(reads.Release());
  EXPECT_LT(Dirty(), kLines * 40 / 100);
  EXPECT_TRUE(rig_.OriginHasPattern(0, kBlock * 16, 7));  // lowest lines first, in origin order
}

TEST_F(PressureTest, WritersPastTheHighWatermarkAreSlowedNotFailed) {
  // The background cleaner runs, but cannot clean: the origin refuses writes.
  rig_.origin().FailAlways(kFaultWrite);
  config_.background_cleaner = true;
  ASSERT_TRUE(rig_.Restart(config_).ok());
  ASSERT_TRUE(rig_.engine().SetCleaner({.dirty_target_pct = 10, .dirty_high_pct = 20,
                                        .dirty_low_pct = 15, .batch_lines = 64}).ok());
  WriteNewLines(kLines * 20 / 100);  // at the high watermark: nobody waits yet
  EXPECT_EQ(rig_.engine().stats().throttled_writes, 0u);
  WriteNewLines(kLines * 10 / 100);  // past it: each write waits, and lands
  const uint64_t throttled = rig_.engine().stats().throttled_writes;
  // Each waits 10 ms times the cube of how far past the limit dirty lines
  // are towards a cache all dirty: the first 39 past it, under a microsecond.
  EXPECT_GE(throttled, kLines * 10 / 100 - 40);
  EXPECT_LE(throttled, kLines * 10 / 100);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, next_line_ * kBlock, 7));
  // On a reactor: held back there (a timer on its ring), then served.
  constexpr size_t kWrites = 8;
  AlignedBuffer data(kWrites * kBlock);
  FillPattern(data.data(), next_line_ * kBlock, kWrites * kBlock, 8);
  Completions done(kWrites);
  OnReactor([&] {
    for (size_t i = 0; i < kWrites; ++i) {
      rig_.engine().WriteAsync((next_line_ + i) * kBlock, data.data() + i * kBlock, kBlock, false, done.at(i));
    }
  }, done, kWrites);
  EXPECT_EQ(done.failed(), 0u) << done.last_error();
  EXPECT_EQ(rig_.engine().stats().throttled_writes, throttled + kWrites);
  EXPECT_TRUE(HasPattern(rig_.engine(), next_line_ * kBlock, kWrites * kBlock, 8));
  next_line_ += kWrites;
  // Off any reactor: held back on the engine's own, once each.
  FillPattern(data.data(), next_line_ * kBlock, kWrites * kBlock, 9);
  Completions off(kWrites);
  for (size_t i = 0; i < kWrites; ++i) {
    rig_.engine().WriteAsync((next_line_ + i) * kBlock, data.data() + i * kBlock, kBlock, false, off.at(i));
  }
  off.Wait(kWrites);
  EXPECT_EQ(off.failed(), 0u) << off.last_error();
  EXPECT_EQ(rig_.engine().stats().throttled_writes, throttled + 2 * kWrites);
  EXPECT_TRUE(HasPattern(rig_.engine(), next_line_ * kBlock, kWrites * kBlock, 9));
  // Write-through writes are never slowed: they make nothing dirty.
  rig_.origin().ClearFaults();
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteThrough).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 40 << 20, kBlock, 9).ok());
  EXPECT_EQ(rig_.engine().stats().throttled_writes, throttled + 2 * kWrites);
}

TEST_F(PressureTest, RewritesOfDirtyLinesAreNotSlowed) {
  // A database or a VM image rewriting its hot set in write-back: past the
  // high watermark, a write over lines that are all dirty already adds no
  // dirty line and takes no clean one, so it is not held back; a write
  // that touches one line more is.
  rig_.origin().FailAlways(kFaultWrite);  // the cleaner cannot catch up
  config_.background_cleaner = true;
  ASSERT_TRUE(rig_.Restart(config_).ok());
  ASSERT_TRUE(rig_.engine().SetCleaner({.dirty_target_pct = 10, .dirty_high_pct = 20,
                                        .dirty_low_pct = 15, .batch_lines = 64}).ok());
  WriteNewLines(kLines * 40 / 100);  // well past the high watermark
  const uint64_t throttled = rig_.engine().stats().throttled_writes;
  ASSERT_GT(throttled, 0u);
  for (uint64_t line = 0; line + 4 <= next_line_; line += 4) {  // 16 KiB over 4 dirty lines
    ASSERT_TRUE(WritePattern(rig_.engine(), line * kBlock, 4 * kBlock, 8).ok());
  }
  EXPECT_EQ(rig_.engine().stats().throttled_writes, throttled);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, next_line_ / 4 * 4 * kBlock, 8));
  // The last dirty line and the first new one: held back, then landed.
  ASSERT_TRUE(WritePattern(rig_.engine(), (next_line_ - 1) * kBlock, 2 * kBlock, 9).ok());
  EXPECT_EQ(rig_.engine().stats().throttled_writes, throttled + 1);
  EXPECT_TRUE(HasPattern(rig_.engine(), (next_line_ - 1) * kBlock, 2 * kBlock, 9));
  rig_.origin().ClearFaults();
}

TEST_F(PressureTest, BadSettingsAreRefusedAndChangeNothing) {
  const EngineConfig before = rig_.engine().settings();
  Status s = rig_.engine().SetCleaner({.dirty_target_pct = 50, .dirty_high_pct = 60,
                                       .dirty_low_pct = 40, .batch_lines = 64});  // target above low
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("target <= low < high"), std::string::npos) << s.message();
  const EngineConfig after = rig_.engine().settings();
  EXPECT_EQ(after.dirty_target_pct, before.dirty_target_pct);
  EXPECT_EQ(after.dirty_low_pct, before.dirty_low_pct);
  // A good one is saved: in force after a restart.
  ASSERT_TRUE(rig_.engine().SetCleaner({.dirty_target_pct = 5, .dirty_high_pct = 70,
                                        .dirty_low_pct = 30, .batch_lines = 32}).ok());
  ASSERT_TRUE(rig_.Restart(config_).ok());
  EXPECT_EQ(rig_.engine().settings().dirty_target_pct, 5u);
  EXPECT_EQ(rig_.engine().settings().dirty_high_pct, 70u);
}

}  // namespace
}  // namespace cachecore::testing
