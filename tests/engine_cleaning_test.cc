// Cleaning does not hold client I/O behind the origin: while a flush's
// writes are on their way to a slow origin, clients read and write the very
// lines being cleaned; what they wrote meanwhile stays dirty (the origin has
// the older copy) and the next flush takes it. An origin write to such a
// line waits for the cleaner's copy to land first, so it is never undone.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "support/async_requests.h"
#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t K = 1024;

// An origin whose next write (after Close) waits at a gate until the test
// opens it; later writes pass.
class GatedDevice : public BlockDevice {
 public:
  explicit GatedDevice(BlockDevice* target) : target_(target) {}
  uint64_t size_bytes() const override { return target_->size_bytes(); }
  std::string identity() const override { return target_->identity(); }
  bool supports_discard() const override { return discards_ && target_->supports_discard(); }
  void DiscardsNothing() { discards_ = false; }
  Status SubmitAndWait(std::span<IoRequest> requests) override {
    bool writes = false;
    for (const IoRequest& r : requests) writes |= r.op == IoOp::kWrite;
    std::unique_lock lock(mu_);
    if (writes && armed_) {
      armed_ = false;
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
      --waiting_;
    }
    lock.unlock();
    return target_->SubmitAndWait(requests);
  }
  void Close() {
    std::lock_guard lock(mu_);
    open_ = false;
    armed_ = true;
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void AwaitWriter() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return waiting_ > 0; });
  }

 private:
  BlockDevice* target_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true, armed_ = false;
  int waiting_ = 0;
  bool discards_ = true;
};

class CleaningTest : public ::testing::Test {
 protected:
  CleaningTest() : rig_(Options()), gate_(&rig_.origin()) {}
  static RigOptions Options() {
    RigOptions o;
    o.volatile_caches = false;
    return o;
  }
  void SetUp() override {
    EngineConfig c;
    c.line_size = 4096;
    c.mode = CacheMode::kWriteBack;
    c.sequential_cutoff = 0;
    c.background_cleaner = false;
    auto e = Engine::Create({&gate_, &rig_.cache(), &rig_.store()}, c, Replace::kNothing);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e.value());
  }
  void TearDown() override {
    gate_.Open();
    if (engine_) {
      EXPECT_TRUE(engine_->Shutdown().ok());
    }
  }
  EngineRig rig_;
  GatedDevice gate_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(CleaningTest, ClientsUseLinesWhileTheyAreCleaned) {
  ASSERT_TRUE(WritePattern(*engine_, 0, 64 * K, 1).ok());  // 16 dirty lines
  gate_.Close();
  auto flush = std::async(std::launch::async, [&] { return engine_->Flush(); });
  gate_.AwaitWriter();  // the flush's origin write is held at the gate
  // The lines being cleaned answer reads and take writes meanwhile.
  EXPECT_TRUE(HasPattern(*engine_, 0, 64 * K, 1));
  ASSERT_TRUE(WritePattern(*engine_, 16 * K, 8 * K, 2).ok());
  EXPECT_TRUE(HasPattern(*engine_, 16 * K, 8 * K, 2));
  EXPECT_EQ(flush.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  gate_.Open();
  ASSERT_TRUE(flush.get().ok());
  // The flush took what the lines held when it read them; the two lines
  // rewritten since are dirty, with the newer data.
  EXPECT_TRUE(rig_.OriginHasPattern(0, 16 * K, 1));
  EXPECT_TRUE(rig_.OriginHasPattern(16 * K, 8 * K, 1));
  EXPECT_EQ(engine_->stats().dirty_lines, 2u);
  EXPECT_TRUE(HasPattern(*engine_, 16 * K, 8 * K, 2));
  ASSERT_TRUE(engine_->Flush().ok());
  EXPECT_TRUE(rig_.OriginHasPattern(16 * K, 8 * K, 2));
  EXPECT_EQ(engine_->stats().dirty_lines, 0u);
}

// A line being cleaned whose dirty copy a discard drops, then written
// around the cache: that write goes to the origin, and waits until the
// cleaner's older copy has landed (or that copy would land over it).
TEST_F(CleaningTest, AnOriginWriteWaitsForTheCleanersCopy) {
  ASSERT_TRUE(WritePattern(*engine_, 0, 16 * K, 3).ok());  // lines 0..3 dirty
  ASSERT_TRUE(engine_->SetSequentialCutoff(4096).ok());    // later writes go around the cache
  gate_.Close();
  auto flush = std::async(std::launch::async, [&] { return engine_->Flush(); });
  gate_.AwaitWriter();  // the cleaner's copy of lines 0..3 is held
  auto client = std::async(std::launch::async, [&] {
    Status d = engine_->Discard(8 * K, 4 * K);  // line 2's dirty copy dropped
    return d.ok() ? WritePattern(*engine_, 8 * K, 4 * K, 4) : d;
  });
  EXPECT_EQ(client.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "the origin took a write for a line whose older copy was still on its way";
  gate_.Open();
  ASSERT_TRUE(flush.get().ok());
  ASSERT_TRUE(client.get().ok());
  EXPECT_TRUE(rig_.OriginHasPattern(8 * K, 4 * K, 4));
  EXPECT_TRUE(HasPattern(*engine_, 8 * K, 4 * K, 4));
  EXPECT_TRUE(rig_.OriginHasPattern(0, 8 * K, 3));
  EXPECT_TRUE(rig_.OriginHasPattern(12 * K, 4 * K, 3));
}

// On a reactor, a trim over a line being cleaned parks until the cleaning
// ends (no worker thread waits for the cleaner), and its origin discard
// still lands after the cleaner's copy: the block reads as trimmed, not
// as the older data.
TEST_F(CleaningTest, OnAReactorATrimOverALineBeingCleanedParksUntilItEnds) {
  ASSERT_TRUE(WritePattern(*engine_, 0, 16 * K, 3).ok());  // lines 0..3 dirty
  gate_.Close();
  auto flush = std::async(std::launch::async, [&] { return engine_->Flush(); });
  gate_.AwaitWriter();  // the cleaner's copy of lines 0..3 is held
  auto reactor = Reactor::Create();
  ASSERT_TRUE(reactor.ok());
  Reactor* r = reactor.value().get();
  std::thread runner([r] { r->Run(); });
  Completions trimmed(1);
  FnTask trim([&] { engine_->DiscardAsync(8 * K, 4 * K, trimmed.at(0)); });
  r->Post(&trim);
  EXPECT_FALSE(trimmed.WaitFor(1, std::chrono::seconds(1)))
      << "the origin took a discard for a line whose older copy was still on its way";
  gate_.Open();
  ASSERT_TRUE(flush.get().ok());
  trimmed.Wait(1);
  r->Stop();
  runner.join();
  EXPECT_EQ(trimmed.failed(), 0u) << trimmed.last_error();
  AlignedBuffer got(4 * K);
  ASSERT_TRUE(rig_.raw_origin().Read(8 * K, got.data(), 4 * K).ok());
  for (size_t i = 0; i < 4 * K; ++i) ASSERT_EQ(got.data()[i], 0) << "the cleaner's copy landed after the trim";
  EXPECT_TRUE(rig_.OriginHasPattern(0, 8 * K, 3));
}

// On a reactor, a write-back write to a line that a trim left uncached
// while the line is being cleaned, into a cache with no slot to give (every
// line dirty): it would go around the cache, to the origin, where the
// cleaner's older copy has yet to land. It parks until the cleaning ends
// (no worker thread waits for the cleaner), then lands.
TEST_F(CleaningTest, OnAReactorAWriteAroundALineBeingCleanedParksUntilItEnds) {
  gate_.DiscardsNothing();  // a trim then only drops the cached copy, at once
  const uint64_t lines = engine_->capacity_lines();
  ASSERT_TRUE(WritePattern(*engine_, 0, lines * 4 * K, 3).ok());  // every slot dirty
  gate_.Close();
  auto flush = std::async(std::launch::async, [&] { return engine_->Flush(); });
  gate_.AwaitWriter();  // the cleaner's copy of the first lines is held
  ASSERT_TRUE(engine_->Discard(8 * K, 4 * K).ok());  // line 2 uncached, still being cleaned
  ASSERT_TRUE(WritePattern(*engine_, lines * 4 * K, 4 * K, 5).ok());  // takes its slot
  auto reactor = Reactor::Create();
  ASSERT_TRUE(reactor.ok());
  Reactor* r = reactor.value().get();
  std::thread runner([r] { r->Run(); });
  AlignedBuffer data(4 * K);
  FillPattern(data.data(), 8 * K, 4 * K, 4);
  Completions written(1);
  FnTask write([&] { engine_->WriteAsync(8 * K, data.data(), 4 * K, false, written.at(0)); });
  r->Post(&write);
  EXPECT_FALSE(written.WaitFor(1, std::chrono::seconds(1)))
      << "the write reached the origin while the cleaner's older copy was on its way";
  gate_.Open();
  ASSERT_TRUE(flush.get().ok());
  written.Wait(1);
  r->Stop();
  runner.join();
  EXPECT_EQ(written.failed(), 0u) << written.last_error();
  EXPECT_TRUE(HasPattern(*engine_, 8 * K, 4 * K, 4));
  ASSERT_TRUE(engine_->Flush().ok());
  EXPECT_TRUE(rig_.OriginHasPattern(8 * K, 4 * K, 4));
}

}  // namespace
}  // namespace cachecore::testing
