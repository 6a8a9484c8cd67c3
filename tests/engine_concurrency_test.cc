// Many clients at once on a cache much smaller than their data, while a
// manager switches modes, flushes, syncs, pins and unpins ranges, opens and
// closes the placement window (the mover then fills, promotes, demotes and
// cleans beside the clients) and reads statistics: no deadlock, no error,
// and every client reads back exactly what it wrote.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>

#include "support/block_io.h"
#include "support/engine_rig.h"
#include "support/fault_device.h"
#include "cachecore/engine/steps.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t K = 1024;

// Counts the engine's steps; the first sync to begin waits at its epoch
// until `followers` callers are waiting for the next one.
struct SyncSteps {
  std::mutex mu;
  std::condition_variable changed;
  int syncs = 0, waiting = 0, followers = 0;
};
SyncSteps* g_sync_steps = nullptr;

void CountSyncSteps(const char* step) {
  SyncSteps& s = *g_sync_steps;
  std::unique_lock lock(s.mu);
  if (std::string_view(step) == "sync-group-waiting") ++s.waiting;
  if (std::string_view(step) != "sync-1-epoch-begun") return s.changed.notify_all();
  ++s.syncs;
  s.changed.notify_all();
  // Bounded only so that an engine without group commit (its followers
  // never wait) fails below instead of hanging here.
  if (s.syncs == 1) {
    s.changed.wait_for(lock, std::chrono::seconds(20), [&] { return s.waiting == s.followers; });
  }
}

// Flushes that arrive while a sync runs share the next one (group commit):
// eight concurrent Sync calls run the device flushes and the log sync
// twice, not eight times, and each returns only after a sync that began
// after it was called.
TEST(GroupCommitTest, ConcurrentSyncsShareOneSync) {
  EngineRig rig;
  EngineConfig c;
  c.mode = CacheMode::kWriteBack;
  c.background_cleaner = false;
  ASSERT_TRUE(rig.Create(c).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 64 * K, 1).ok());
  SyncSteps steps;
  steps.followers = 7;
  g_sync_steps = &steps;
  SetStepObserver(CountSyncSteps);
  std::thread first([&] { EXPECT_TRUE(rig.engine().Sync().ok()); });
  {
    std::unique_lock lock(steps.mu);  // the first is inside its sync
    steps.changed.wait(lock, [&] { return steps.syncs == 1; });
  }
  std::vector<std::thread> followers;
  for (int i = 0; i < steps.followers; ++i) {
    followers.emplace_back([&] { EXPECT_TRUE(rig.engine().Sync().ok()); });
  }
  first.join();
  for (std::thread& t : followers) t.join();
  SetStepObserver(nullptr);
  EXPECT_EQ(steps.waiting, 7);
  EXPECT_EQ(steps.syncs, 2) << "concurrent flushes each ran a sync of their own";
}

std::function<void(std::string_view)>* g_step_fn = nullptr;
void RunStepFn(const char* step) { (*g_step_fn)(step); }

// A caller waiting for the next sync gets the status of the sync that
// covered it, not a later one's: here sync 2 (led by another caller) fails
// its origin flush while the caller is still on its way, and sync 3 then
// succeeds before the caller looks. Found by a second reader: the caller
// took whatever the last ended sync had returned, so it was told its data
// was durable (or, the other way round, a false EIO).
TEST(GroupCommitTest, ACallerGetsTheStatusOfTheSyncThatCoveredIt) {
  EngineRig rig;
  EngineConfig c;
  c.mode = CacheMode::kWriteBack;
  c.background_cleaner = false;
  ASSERT_TRUE(rig.Create(c).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 64 * K, 1).ok());
  std::mutex mu;
  std::condition_variable cv;
  int syncs = 0;
  bool release_first = false, first_done = false, caller_waited = false;
  Status second, third;
  std::function<void(std::string_view)> fn = [&](std::string_view step) {
    std::unique_lock lock(mu);
    if (step == "sync-1-epoch-begun" && ++syncs == 1) {
      cv.notify_all();
      cv.wait(lock, [&] { return release_first; });  // sync 1 waits for the caller
    }
    if (step != "sync-group-waiting" || caller_waited) return;
    caller_waited = true;  // the caller is registered for the next sync
    release_first = true;
    cv.notify_all();
    cv.wait(lock, [&] { return first_done; });
    lock.unlock();
    rig.origin().FailAlways(kFaultFlush);
    std::thread([&] { second = rig.engine().Sync(); }).join();  // covers the caller
    rig.origin().ClearFaults();
    std::thread([&] { third = rig.engine().Sync(); }).join();
  };
  g_step_fn = &fn;
  SetStepObserver(RunStepFn);
  std::thread first([&] {
    EXPECT_TRUE(rig.engine().Sync().ok());
    std::lock_guard lock(mu);
    first_done = true;
    cv.notify_all();
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return syncs == 1; });
  }
  Status caller = rig.engine().Sync();
  first.join();
  SetStepObserver(nullptr);
  EXPECT_FALSE(second.ok());
  EXPECT_TRUE(third.ok()) << third.ToString();
  EXPECT_FALSE(caller.ok()) << "the sync that covered this caller failed, yet it got OK";
  EXPECT_EQ(syncs, 3);
}

// Found by reading: leaving write-back cleaned the lines that were dirty
// when its flush began, but a write-back write that had decided before the
// switch and not yet written made its line dirty after that: SetMode said
// every line was clean, and one was not. Now a write-back write looks at
// the mode again once it holds its flush epoch, and SetMode waits for the
// writes of earlier epochs (a sync) before it looks for dirty lines.
TEST(ModeSwitchTest, LeavingWriteBackWaitsForAWriteThatDecidedBefore) {
  EngineRig rig;
  EngineConfig c;
  c.mode = CacheMode::kWriteBack;
  c.background_cleaner = false;
  ASSERT_TRUE(rig.Create(c).ok());
  std::mutex mu;
  std::condition_variable cv;
  bool paused = false, released = false;
  std::function<void(std::string_view)> fn = [&](std::string_view step) {
    std::unique_lock lock(mu);
    if (step == "write-back-0-epoch-held" && !paused) {
      paused = true;  // decided, epoch held, nothing written yet
      cv.notify_all();
      cv.wait(lock, [&] { return released; });
    } else if (step == "sync-1-epoch-begun" && paused && !released) {
      released = true;  // the switch's sync waits for the write from here
      cv.notify_all();
    }
  };
  g_step_fn = &fn;
  SetStepObserver(RunStepFn);
  std::thread writer([&] { EXPECT_TRUE(WritePattern(rig.engine(), 0, 4 * K, 3).ok()); });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return paused; });
  }
  Status switched = rig.engine().SetMode(CacheMode::kWriteThrough);
  writer.join();
  SetStepObserver(nullptr);
  ASSERT_TRUE(switched.ok()) << switched.ToString();
  EXPECT_EQ(rig.engine().stats().dirty_lines, 0u) << "SetMode left write-back with a dirty line";
  EXPECT_TRUE(HasPattern(rig.engine(), 0, 4 * K, 3));
}

// Found by a second reader: a write over a block still dirty goes to the
// cache whatever the mode, and one that landed while the switch's flush had
// the line on its way to the origin left it dirty after SetMode said every
// line was clean. The switch now flushes again while a line is dirty.
TEST(ModeSwitchTest, AWriteOverADirtyBlockWhileItIsCleanedIsCleanedToo) {
  EngineRig rig;
  EngineConfig c;
  c.mode = CacheMode::kWriteBack;
  c.background_cleaner = false;
  ASSERT_TRUE(rig.Create(c).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 20 * K, 4 * K, 1).ok());  // dirty
  bool rewritten = false;
  std::function<void(std::string_view)> fn = [&](std::string_view step) {
    if (step != "flush-1-origin-written" || rewritten) return;
    rewritten = true;  // the line's stripe is released while its data goes to the origin
    EXPECT_TRUE(WritePattern(rig.engine(), 20 * K, 4 * K, 2).ok());
  };
  g_step_fn = &fn;
  SetStepObserver(RunStepFn);
  Status switched = rig.engine().SetMode(CacheMode::kWriteThrough);
  SetStepObserver(nullptr);
  ASSERT_TRUE(rewritten);
  ASSERT_TRUE(switched.ok()) << switched.ToString();
  EXPECT_EQ(rig.engine().stats().dirty_lines, 0u) << "SetMode left write-back with a dirty line";
  EXPECT_TRUE(HasPattern(rig.engine(), 20 * K, 4 * K, 2));
  AlignedBuffer origin(4 * K), want(4 * K);
  ASSERT_TRUE(rig.raw_origin().Read(20 * K, origin.data(), 4 * K).ok());
  FillPattern(want.data(), 20 * K, 4 * K, 2);
  EXPECT_EQ(std::memcmp(origin.data(), want.data(), 4 * K), 0);
}

// A cache device that cannot flush must still be able to drain to the
// origin and leave write-back (its dirty data is written there and synced).
TEST(ModeSwitchTest, ACacheThatCannotFlushStillLeavesWriteBack) {
  EngineRig rig;
  EngineConfig c;
  c.mode = CacheMode::kWriteBack;
  c.background_cleaner = false;
  ASSERT_TRUE(rig.Create(c).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 16 * K, 4).ok());
  rig.cache().FailAlways(kFaultFlush);
  Status switched = rig.engine().SetMode(CacheMode::kWriteThrough);
  rig.cache().ClearFaults();
  ASSERT_TRUE(switched.ok()) << switched.ToString();
  EXPECT_EQ(rig.engine().stats().dirty_lines, 0u);
  EXPECT_EQ(rig.engine().mode(), CacheMode::kWriteThrough);
}

class ConcurrencyTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(ConcurrencyTest, ClientsAndManagerTogether) {
  RigOptions ro;
  ro.volatile_caches = false;
  EngineRig rig(ro);  // 8 MiB origin, 1 MiB of cache lines
  EngineConfig c;
  c.line_size = GetParam();
  c.mode = CacheMode::kWriteBack;
  c.sequential_cutoff = 0;
  c.dirty_high_pct = 50;
  c.dirty_low_pct = 20;
  ASSERT_TRUE(rig.Create(c).ok());
  Engine& e = rig.engine();

  constexpr int kClients = 6;
  constexpr uint64_t kRegion = (8 << 20) / kClients / (64 * K) * (64 * K);
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::mutex first_mu;
  std::string first_error;  // what went wrong first, for the failure message
  auto failed = [&](const std::string& what) {
    std::lock_guard lock(first_mu);
    if (errors++ == 0) first_error = what;
  };
  std::vector<std::vector<uint32_t>> tags(kClients, std::vector<uint32_t>(kRegion / (4 * K), 0));
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 rng(t + 1);
      uint64_t base = t * kRegion;
      for (int op = 0; op < 1500; ++op) {
        uint64_t block = rng() % (kRegion / (4 * K));
        uint64_t n = std::min<uint64_t>(1 + rng() % 8, kRegion / (4 * K) - block);
        if (rng() % 2) {
          uint32_t tag = (t << 24) | op;
          if (Status w = WritePattern(e, base + block * 4 * K, n * 4 * K, tag); !w.ok()) failed("write: " + w.ToString());
          for (uint64_t i = 0; i < n; ++i) tags[t][block + i] = tag;
        } else {
          for (uint64_t i = 0; i < n; ++i) {
            uint64_t off = base + (block + i) * 4 * K;
            uint32_t tag = tags[t][block + i];
            bool good = tag == 0 ? true : static_cast<bool>(HasPattern(e, off, 4 * K, tag));
            if (!good) failed("read back at " + std::to_string(off));
          }
        }
      }
    });
  }
  std::thread manager([&] {
    std::mt19937 rng(99);
    static const CacheMode kModes[] = {CacheMode::kWriteBack, CacheMode::kWriteThrough,
                                       CacheMode::kWriteAround, CacheMode::kReadOnly,
                                       CacheMode::kPassThrough};
    while (!stop.load()) {
      const uint64_t at = (rng() % 124) * 64 * K, length = (1 + rng() % 4) * 64 * K;  // within 8 MiB
      switch (rng() % 7) {
        // Busy: the clients kept re-dirtying what a mode switch or a flush
        // cleaned, pass after pass, and it gave up (as it is meant to; the
        // data stays dirty and safe). A slow manager meets it more often.
        case 0: if (Status m = e.SetMode(kModes[rng() % 5]); !m.ok() && m.code() != StatusCode::kBusy) failed("mode: " + m.ToString()); break;
        case 1: if (Status f = e.Flush(); !f.ok() && f.code() != StatusCode::kBusy) failed("flush: " + f.ToString()); break;
        case 2: if (Status y = e.Sync(); !y.ok()) failed("sync: " + y.ToString()); break;
        case 3: {
          Status s = e.Pin(at, length);  // refused past the limit: fine
          if (!s.ok() && s.code() != StatusCode::kBusy) failed("pin: " + s.ToString());
          break;
        }
        case 4: {
          Status s = e.Unpin(at, length);
          if (!s.ok() && s.code() != StatusCode::kNotFound) failed("unpin: " + s.ToString());
          break;
        }
        case 5: {
          PlacementSettings p;
          p.rate_bytes_per_s = 1ull << 30;
          if (!e.placement().window) p.window = ParsePlacementWindow("00:00-24:00").value();
          if (Status q = e.SetPlacement(p); !q.ok()) failed("placement: " + q.ToString());
          break;
        }
        default: (void)e.stats(); (void)e.pins(); (void)e.movement(); break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  for (auto& th : clients) th.join();
  stop = true;
  manager.join();
  EXPECT_EQ(errors.load(), 0) << "first: " << first_error;
  for (int t = 0; t < kClients; ++t) {
    for (uint64_t b = 0; b < tags[t].size(); ++b) {
      if (tags[t][b] == 0) continue;
      ASSERT_TRUE(HasPattern(e, t * kRegion + b * 4 * K, 4 * K, tags[t][b]));
    }
  }
  ASSERT_TRUE(e.Detach().ok());
}

// Writers that never pause, over four times the cache, in write-back: no
// write fails, the cache cleans (and evicts) as it goes, and a flush in the
// middle ends and leaves on the origin every write made before it began.
TEST_P(ConcurrencyTest, SustainedWritesLargerThanTheCacheWithAFlushInTheMiddle) {
  RigOptions ro;
  ro.volatile_caches = false;
  EngineRig rig(ro);  // 8 MiB origin, 1 MiB of cache lines
  EngineConfig c;
  c.line_size = GetParam();
  c.mode = CacheMode::kWriteBack;
  c.sequential_cutoff = 0;
  ASSERT_TRUE(rig.Create(c).ok());
  Engine& e = rig.engine();

  constexpr int kWriters = 4;
  constexpr uint64_t kBlocks = (8 << 20) / (4 * K);
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::atomic<uint64_t> written{0};
  // Per block, the tag of the last write that completed (0: none yet) and
  // of the one in flight.
  std::vector<std::atomic<uint32_t>> last(kBlocks), in_flight(kBlocks);
  std::vector<std::thread> writers;
  for (int t = 0; t < kWriters; ++t) {
    writers.emplace_back([&, t] {
      std::mt19937 rng(t + 7);
      for (uint32_t op = 1; !stop.load(); ++op) {
        uint64_t block = (rng() % (kBlocks / kWriters)) * kWriters + t;  // each writer its own blocks
        uint32_t tag = (static_cast<uint32_t>(t) << 24) | op;
        in_flight[block].store(tag);
        if (!WritePattern(e, block * 4 * K, 4 * K, tag).ok()) ++errors;
        last[block].store(tag);
        written.fetch_add(4 * K);
      }
    });
  }
  while (written.load() < 4 * (1 << 20)) std::this_thread::yield();  // four caches' worth
  std::vector<uint32_t> before_flush(kBlocks);
  for (uint64_t b = 0; b < kBlocks; ++b) before_flush[b] = last[b].load();
  ASSERT_TRUE(e.Flush().ok()) << "a flush under sustained writes did not end";
  // Every write completed before the flush began is on the origin now, or
  // was overwritten since by a later one (whose data may still be dirty).
  std::vector<uint32_t> after_flush(kBlocks);
  for (uint64_t b = 0; b < kBlocks; ++b) after_flush[b] = last[b].load();
  stop = true;
  for (auto& th : writers) th.join();
  EXPECT_EQ(errors.load(), 0);
  StatsSnapshot st = e.stats();
  EXPECT_GT(st.evictions + st.bypassed_no_space, 0u);  // the cache was full: lines made room, or writes went around
  EXPECT_GT(st.cleaned_blocks, 0u);
  AlignedBuffer got(4 * K), want(4 * K), newer(4 * K);
  for (uint64_t b = 0; b < kBlocks; ++b) {
    if (before_flush[b] == 0 || after_flush[b] != before_flush[b]) continue;  // untouched or rewritten
    ASSERT_TRUE(rig.raw_origin().Read(b * 4 * K, got.data(), 4 * K).ok());
    FillPattern(want.data(), b * 4 * K, 4 * K, before_flush[b]);
    FillPattern(newer.data(), b * 4 * K, 4 * K, in_flight[b].load());  // landed during the flush
    ASSERT_TRUE(std::memcmp(got.data(), want.data(), 4 * K) == 0 ||
                std::memcmp(got.data(), newer.data(), 4 * K) == 0)
        << "block " << b << " missed the flush";
  }
  ASSERT_TRUE(e.Detach().ok());
}

INSTANTIATE_TEST_SUITE_P(LineSizes, ConcurrencyTest, ::testing::Values(4096u, 65536u));

}  // namespace
}  // namespace cachecore::testing
