// The concurrent crash model (RocksDB's db_stress with expected state, for
// a cache): four clients read, write (aligned and not, across lines, some
// FUA), write zeroes, trim and sync at random while the cleaner runs with
// low watermarks, the mover runs with the placement window open and pins
// changing, and a manager switches modes and flushes. The power fails at a
// random moment under all of it (unsynced writes dropped, torn or landed,
// the store's unsynced state lost); now and then the engine is restarted
// cleanly instead. After every cut and every restart the store's records
// must agree with the engine's map, and every sector must read back as one
// of the values a disk with a volatile write cache may return
// (support/expected_state.h has the rules); what it read is then its new
// durable value. Odd seeds send the clients' requests through the engine's
// asynchronous calls on a reactor (hits served there, the rest on the
// workers) with the cache device completing the reactor's I/O out of order.
//
// A failure names the seed, line size, cycle, sector, the value read and
// the sector's history. CACHECTL_MODEL_SEEDS (20), CACHECTL_MODEL_SEED_BASE
// (1), CACHECTL_MODEL_CUTS (20) and CACHECTL_MODEL_CYCLE_OPS (requests per
// cycle, on average; 300) make it run longer; scripts/stress_loop.sh loops
// it with random seeds.
#include <gtest/gtest.h>

#include "cachecore/crypto/cache_key.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>

#include "support/engine_rig.h"
#include "support/expected_state.h"
#include "support/figures.h"
#include "support/stress_workload.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kSector = 512;

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

const char* CutName(PowerCutMode mode) {
  switch (mode) {
    case PowerCutMode::kDropUnsynced: return "unsynced writes dropped";
    case PowerCutMode::kTear: return "unsynced writes torn";
    case PowerCutMode::kKeepUnsynced: return "unsynced writes landed";
  }
  return "?";
}

const char* ClassName(BlockClass c) {
  switch (c) {
    case BlockClass::kInvalid: return "invalid";
    case BlockClass::kClean: return "clean";
    case BlockClass::kDirty: return "dirty";
    case BlockClass::kDirtyFresh: return "dirtyfresh";
    case BlockClass::kDirtyOverwritten: return "dirtyoverwritten";
    case BlockClass::kCleanFresh: return "cleanfresh";
  }
  return "?";
}

// Where the sector's copies are, for a failure message: the origin's, and
// the cache slot's with its record's class (the store as the engine sees
// it now, unsynced puts included).
std::string DescribeCopies(EngineRig& rig, uint32_t line_size, uint64_t sector) {
  AlignedBuffer data(kSector);
  auto stamp = [&](BlockDevice& device, uint64_t offset) -> std::string {
    if (!device.Read(offset, data.data(), kSector).ok()) return "unreadable";
    std::optional<uint64_t> id = ReadStamp(data.data(), sector);
    return id ? "write " + std::to_string(*id) : "not a stamp of this sector";
  };
  const uint64_t line = sector * kSector / line_size;
  const uint64_t in_line = sector * kSector % line_size;
  std::string out = "the origin holds " + stamp(rig.origin(), sector * kSector);
  bool recorded = false;
  Status s = rig.store().ForEachLine([&](uint64_t slot, const LineRecord& r) {
    if (r.origin_line != line) return Status::Ok();
    const uint32_t block = static_cast<uint32_t>(in_line / 4096);
    out += "; slot " + std::to_string(slot) + " is recorded for its line (the block " +
           ClassName(r.classes[block]) + ") and holds " +
           stamp(rig.cache(), kDataOffset + slot * line_size + in_line);
    recorded = true;
    return Status::Ok();
  });
  if (!s.ok()) return out + "; the store cannot be read: " + s.ToString();
  return recorded ? out : out + "; no slot is recorded for its line";
}

class EngineStressTest : public ::testing::TestWithParam<std::tuple<uint32_t, int>> {
 protected:
  void SetUp() override {
    line_size_ = std::get<0>(GetParam());
    seed_ = static_cast<uint64_t>(std::get<1>(GetParam()));
    rng_.seed(seed_ * 7919 + line_size_);
    RigOptions ro;  // 8 MiB origin, 1 MiB of cache lines: evictions all the time
    ro.seed = seed_;
    rig_ = std::make_unique<EngineRig>(ro);
    model_ = std::make_unique<ExpectedState>(rig_->raw_origin().size_bytes() / kSector);
    config_.line_size = line_size_;
    config_.mode = CacheMode::kWriteBack;
    config_.sequential_cutoff = seed_ % 4 == 0 ? 256 * 1024 : 0;
    config_.background_cleaner = true;
    // The cleaner's three regimes, by pairs of seeds: low settings (it
    // works in every cycle, flat out past 2 %, writers slowed past 10 %);
    // dirty lines held near 5 % by its controller's rate; and a cache kept
    // nearly all dirty (target 60 %, flat out past 95 %), so that misses
    // and writes find no clean line and go around it (bypassed_no_space).
    struct Regime {
      uint32_t target, low, high;
    };
    constexpr Regime kRegimes[] = {{1, 2, 10}, {5, 30, 40}, {60, 95, 98}};
    const Regime& regime = kRegimes[seed_ / 2 % 3];
    config_.dirty_target_pct = regime.target;
    config_.dirty_low_pct = regime.low;
    config_.dirty_high_pct = regime.high;
    config_.cleaner_batch_lines = 8;
    // One seed in five: encrypted at rest (the cache device's I/O through
    // the encrypting device, its bounce buffers under concurrent clients).
    if (seed_ % 5 == 3) {
      std::vector<uint8_t> secret(64, static_cast<uint8_t>(seed_ + 1));
      Result<std::shared_ptr<const CacheKey>> key = CacheKey::FromSecret(secret.data(), secret.size());
      ASSERT_TRUE(key.ok());
      config_.key = key.value();
    }
    // One seed in two: a RAM tier above the cache, filled by hits while
    // concurrent writes and trims must make it forget what they change.
    if (seed_ % 2 == 1) config_.ram_cache_bytes = kMinRamCacheBytes;
    Status s = rig_->Create(config_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    // One seed in three: a second volume on the same cache, with clients
    // of its own beside the first's (shared slots, cleaner and mover).
    if (seed_ % 3 == 2) {
      Result<VolumeInfo> v = rig_->engine().AddVolume("vol1", &rig_->AddOrigin("vol1", 8 << 20));
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      volumes_.push_back({v->base, std::make_unique<ExpectedState>(v->size / kSector)});
    }
  }
  // What it ran, passed or not (scripts/stress_loop.sh adds them up).
  void TearDown() override {
    RecordFigure("stress_cycles", cycles_);
    RecordFigure("stress_power_cuts", cuts_);
    RecordFigure("stress_bypassed_no_space", bypassed_no_space_);
    RecordFigure("stress_ram_hits", ram_hits_);
  }

  // Runs the workload for a random number of requests, then cuts the power
  // under it or stops it and restarts cleanly; then checks everything.
  void RunCycle(uint64_t cycle, bool cut);
  // After a cut or restart: records against the map, then every sector.
  void CheckAfter(const std::string& where);
  void CheckVolume(const std::string& where, ExpectedState& model, uint64_t base);
  std::string Where(uint64_t cycle, const std::string& event) const {
    return "seed " + std::to_string(seed_) + (seed_ % 2 == 1 ? " (asynchronous)" : "") +
           (volumes_.empty() ? "" : " (two volumes)") +
           ", line size " + std::to_string(line_size_) +
           ", cycle " + std::to_string(cycle) + " (" + event + ")";
  }

  uint32_t line_size_ = 0;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<EngineRig> rig_;
  std::unique_ptr<ExpectedState> model_;
  // The second volume, when there is one: its base and its own model.
  struct OtherVolume {
    uint64_t base;
    std::unique_ptr<ExpectedState> model;
  };
  std::vector<OtherVolume> volumes_;
  EngineConfig config_;
  FailureLog failures_;
  std::atomic<uint64_t> next_id_{1};  // 0 is zeroes
  uint64_t cycles_ = 0, cuts_ = 0;  // begun
  uint64_t busy_flushes_ = 0;
  uint64_t bypassed_no_space_ = 0;  // over every cycle
  uint64_t ram_hits_ = 0;           // over every cycle: reads the RAM tier served
};

void EngineStressTest::RunCycle(uint64_t cycle, bool cut) {
  const uint64_t mean_ops = std::max<uint64_t>(EnvOr("CACHECTL_MODEL_CYCLE_OPS", 300), 4);
  const uint64_t target = mean_ops / 2 + rng_() % mean_ops;
  // And at least this long, so that the cleaner (which looks every 100 ms)
  // and the mover (200 ms, or when pins or the window change) get to work.
  const auto least = std::chrono::milliseconds(rng_() % 120);
  const PowerCutMode mode = static_cast<PowerCutMode>(cuts_ % 3);
  const std::string event =
      cut ? "power cut " + std::to_string(cuts_ + 1) + ", " + CutName(mode) : "clean restart";
  WorkloadOptions wo;
  wo.line_size = line_size_;
  wo.seed = seed_ * 100003 + cycle;
  // Odd seeds run the clients through the asynchronous calls on a reactor,
  // both devices completing the reactor's I/O out of order.
  wo.asynchronous = seed_ % 2 == 1;
  rig_->cache().CompleteOutOfOrder(wo.asynchronous);
  rig_->origin().CompleteOutOfOrder(wo.asynchronous);
  std::vector<std::unique_ptr<StressWorkload>> workloads;
  workloads.push_back(std::make_unique<StressWorkload>(rig_->engine(), *model_, failures_, next_id_, wo));
  for (OtherVolume& v : volumes_) {
    rig_->extra_origin("vol1").CompleteOutOfOrder(wo.asynchronous);
    WorkloadOptions other = wo;
    other.seed = wo.seed * 31 + 1;
    other.volume_base = v.base;
    workloads.push_back(std::make_unique<StressWorkload>(rig_->engine(), *v.model, failures_, next_id_, other));
  }
  auto ops_done = [&] {
    uint64_t n = 0;
    for (const auto& w : workloads) n += w->ops_done();
    return n;
  };
  const auto started = std::chrono::steady_clock::now();
  for (auto& w : workloads) w->Start();
  while ((ops_done() < target || std::chrono::steady_clock::now() - started < least) && !failures_.failed()) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (cut && !failures_.failed()) {
    for (auto& w : workloads) w->PowerFails();
    rig_->Freeze();  // mid-I/O: the clients see errors from here on
  }
  for (auto& w : workloads) {
    w->Stop();
    busy_flushes_ += w->busy_flushes();
  }
  bypassed_no_space_ += rig_->engine().stats().bypassed_no_space;
  ram_hits_ += rig_->engine().stats().ram_hits;
  if (failures_.failed()) {
    std::optional<uint64_t> sector = failures_.sector();
    FAIL() << Where(cycle, "running, before the " + event) << ": " << failures_.first()
           << (sector ? ". Now " + DescribeCopies(*rig_, line_size_, *sector) : "");
  }
  const std::string where = Where(cycle, "after the " + event);
  if (cut) {
    Status s = rig_->PowerCutAndReopen(config_, mode);
    ASSERT_TRUE(s.ok()) << where << ": reopen: " << s.ToString();
    ++cuts_;
  } else {
    Status s = rig_->Restart(config_);
    ASSERT_TRUE(s.ok()) << where << ": restart: " << s.ToString();
    model_->ShutdownCompleted();  // a clean shutdown syncs everything
    for (OtherVolume& v : volumes_) v.model->ShutdownCompleted();
  }
  CheckAfter(where);
}

void EngineStressTest::CheckAfter(const std::string& where) {
  Status agree = rig_->engine().CheckRecordsAgreeForTest();
  ASSERT_TRUE(agree.ok()) << where << ": " << agree.ToString();
  // Sectors of the line space: each volume's model for its own.
  Status clean = rig_->engine().CheckCleanDataForTest([&](uint64_t sector) {
    for (OtherVolume& v : volumes_) {
      if (sector >= v.base / kSector) return v.model->Unspecified(sector - v.base / kSector);
    }
    return model_->Unspecified(sector);
  });
  ASSERT_TRUE(clean.ok()) << where << ": " << clean.ToString();
  CheckVolume(where, *model_, 0);
  for (OtherVolume& v : volumes_) {
    if (!HasFatalFailure()) CheckVolume(where + ", volume vol1", *v.model, v.base);
  }
}

// Every sector of one volume reads back as its model allows: no data lost,
// none of another sector's or another volume's.
void EngineStressTest::CheckVolume(const std::string& where, ExpectedState& model, uint64_t base) {
  constexpr uint64_t kChunk = 128;
  AlignedBuffer buffer(kChunk * kSector);
  for (uint64_t first = 0; first < model.sectors(); first += kChunk) {
    const uint64_t n = std::min(kChunk, model.sectors() - first);
    Status s = rig_->engine().Read(base + first * kSector, buffer.data(), n * kSector);
    ASSERT_TRUE(s.ok()) << where << ": reading back sectors from " << first << ": " << s.ToString();
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t sector = first + i;
      std::optional<uint64_t> got = ReadStamp(buffer.data() + i * kSector, sector);
      ASSERT_TRUE(got.has_value()) << where << ": sector " << sector << " holds data never written to it";
      std::optional<std::string> why = model.CheckRecovered(sector, *got);
      ASSERT_FALSE(why.has_value()) << where << ": sector " << sector << " read back as write " << *got
                                    << ", which it may not hold; " << *why << ". Now "
                                    << DescribeCopies(*rig_, line_size_, base / kSector + sector);
      model.Settle(sector, *got);
    }
  }
  model.ForgetOperations();
}

TEST_P(EngineStressTest, FlushedWritesSurviveCutsUnderConcurrentIo) {
  const uint64_t cuts = EnvOr("CACHECTL_MODEL_CUTS", 20);
  while (cuts_ < cuts) {
    ++cycles_;
    RunCycle(cycles_, rng_() % 4 != 0);  // a clean restart one time in four
    if (HasFatalFailure()) return;
  }
  if (busy_flushes_ > 0) {
    std::printf("note: %llu flushes or mode switches gave up on lines kept busy\n",
                static_cast<unsigned long long>(busy_flushes_));
  }
  // How often the regime kept nearly all dirty reached the path around the
  // cache depends on how fast the clients ran against the cleaner (rarely
  // under the sanitizers), so it is a figure scripts/stress_loop.sh adds up,
  // not an assertion; engine_test, engine_async_test and engine_batch_test
  // drive that path deterministically.
}

// ---- the checker's own rules: never stricter than a disk with a volatile
// write cache, never looser than the contract.

TEST(ExpectedStateTest, ASyncMakesDurableWhatReturnedBeforeIt) {
  ExpectedState m(2);
  m.Acknowledge(m.BeginWrite(0, 2, 1, false));
  const uint64_t sync = m.BeginSync();
  const uint64_t late = m.BeginWrite(1, 1, 2, false);  // in flight while the sync runs
  m.SyncCompleted(sync);
  m.Acknowledge(late);
  EXPECT_TRUE(m.CheckRecovered(0, 0).has_value());  // lost a flushed write
  EXPECT_FALSE(m.CheckRecovered(0, 1).has_value());
  EXPECT_FALSE(m.CheckRecovered(1, 1).has_value());
  EXPECT_FALSE(m.CheckRecovered(1, 2).has_value());  // not flushed, but written
  EXPECT_TRUE(m.CheckRecovered(1, 0).has_value());
}

TEST(ExpectedStateTest, ASyncIssuedBeforeTheWriteReturnedPromisesNothing) {
  ExpectedState m(1);
  const uint64_t w = m.BeginWrite(0, 1, 1, false);
  const uint64_t sync = m.BeginSync();
  m.Acknowledge(w);
  m.SyncCompleted(sync);
  EXPECT_FALSE(m.CheckRecovered(0, 0).has_value());
  EXPECT_FALSE(m.CheckRecovered(0, 1).has_value());
}

TEST(ExpectedStateTest, FuaMakesDurableOnlyItsOwnWrite) {
  ExpectedState m(2);
  m.Acknowledge(m.BeginWrite(1, 1, 1, false));
  m.Acknowledge(m.BeginWrite(0, 1, 2, true));
  EXPECT_TRUE(m.CheckRecovered(0, 0).has_value());
  EXPECT_FALSE(m.CheckRecovered(1, 0).has_value());
}

TEST(ExpectedStateTest, ConcurrentWritesStayAllowedUntilALaterOneIsDurable) {
  ExpectedState m(1);
  const uint64_t a = m.BeginWrite(0, 1, 1, false), b = m.BeginWrite(0, 1, 2, false);
  m.Acknowledge(b);
  m.Acknowledge(a);
  m.SyncCompleted(m.BeginSync());
  EXPECT_FALSE(m.CheckRecovered(0, 1).has_value());
  EXPECT_FALSE(m.CheckRecovered(0, 2).has_value());
  EXPECT_TRUE(m.CheckRecovered(0, 0).has_value());
  m.Acknowledge(m.BeginWrite(0, 1, 3, true));
  EXPECT_TRUE(m.CheckRecovered(0, 1).has_value());
  EXPECT_TRUE(m.CheckRecovered(0, 2).has_value());
}

TEST(ExpectedStateTest, AWriteThatNeverReturnedMayOrMayNotHaveHappened) {
  ExpectedState m(1);
  m.BeginWrite(0, 1, 1, true);  // the power failed under it
  m.SyncCompleted(m.BeginSync());
  EXPECT_FALSE(m.CheckRecovered(0, 0).has_value());
  EXPECT_FALSE(m.CheckRecovered(0, 1).has_value());
}

TEST(ExpectedStateTest, ATrimLeavesZeroOrAnyValueUntilADurableWriteAfterIt) {
  ExpectedState m(1);
  m.Acknowledge(m.BeginWrite(0, 1, 1, true));
  m.Acknowledge(m.BeginWrite(0, 1, 2, true));
  m.Acknowledge(m.BeginTrim(0, 1));
  EXPECT_FALSE(m.CheckRecovered(0, 0).has_value());
  EXPECT_FALSE(m.CheckRecovered(0, 1).has_value());  // the origin's older copy
  EXPECT_TRUE(m.CheckRecovered(0, 7).has_value());   // never written here
  m.Acknowledge(m.BeginWrite(0, 1, 3, true));
  EXPECT_TRUE(m.CheckRecovered(0, 0).has_value());
  EXPECT_TRUE(m.CheckRecovered(0, 1).has_value());
  EXPECT_FALSE(m.CheckRecovered(0, 3).has_value());
}

TEST(ExpectedStateTest, ATrimmedSectorStaysUnspecifiedAcrossARestart) {
  ExpectedState m(1);
  m.Acknowledge(m.BeginWrite(0, 1, 1, true));
  m.Acknowledge(m.BeginTrim(0, 1));
  m.ShutdownCompleted();
  m.Settle(0, 1);  // the origin ignored the discard, say
  m.ForgetOperations();
  EXPECT_TRUE(m.Unspecified(0));
  EXPECT_FALSE(m.CheckRecovered(0, 0).has_value());  // now it does not
  const uint64_t start = m.Now(), end = m.Now();
  EXPECT_FALSE(m.CheckRead(0, 0, start, end).has_value());
  m.Acknowledge(m.BeginWrite(0, 1, 2, false));
  EXPECT_FALSE(m.CheckRecovered(0, 0).has_value());  // not durable yet
  m.SyncCompleted(m.BeginSync());
  EXPECT_FALSE(m.Unspecified(0));
  EXPECT_TRUE(m.CheckRecovered(0, 0).has_value());
  EXPECT_TRUE(m.CheckRecovered(0, 1).has_value());
}

TEST(ExpectedStateTest, AReadSeesEveryWriteThatReturnedBeforeIt) {
  ExpectedState m(1);
  const uint64_t early = m.Now();
  m.Acknowledge(m.BeginWrite(0, 1, 1, false));
  const uint64_t start = m.Now(), end = m.Now();
  EXPECT_TRUE(m.CheckRead(0, 0, start, end).has_value());
  EXPECT_FALSE(m.CheckRead(0, 1, start, end).has_value());
  EXPECT_FALSE(m.CheckRead(0, 0, early, end).has_value());  // issued before the write returned
  EXPECT_TRUE(m.CheckRead(0, 1, early, early).has_value());  // ... but not before it began
}

TEST(ExpectedStateTest, WhatARestartReadsBackIsTheNewDurableValue) {
  ExpectedState m(1);
  m.Acknowledge(m.BeginWrite(0, 1, 1, false));
  m.Acknowledge(m.BeginWrite(0, 1, 2, false));
  ASSERT_FALSE(m.CheckRecovered(0, 1).has_value());
  m.Settle(0, 1);
  m.ForgetOperations();
  EXPECT_TRUE(m.CheckRecovered(0, 2).has_value());
  EXPECT_TRUE(m.CheckRecovered(0, 0).has_value());
  EXPECT_FALSE(m.CheckRecovered(0, 1).has_value());
}

std::vector<int> Seeds() {
  std::vector<int> seeds;
  const uint64_t base = EnvOr("CACHECTL_MODEL_SEED_BASE", 1);
  const uint64_t n = EnvOr("CACHECTL_MODEL_SEEDS", 20);
  for (uint64_t i = 0; i < n; ++i) seeds.push_back(static_cast<int>(base + i));
  return seeds;
}

INSTANTIATE_TEST_SUITE_P(Seeds, EngineStressTest,
                         ::testing::Combine(::testing::Values(4096u, 65536u),
                                            ::testing::ValuesIn(Seeds())),
                         [](const auto& info) {
                           return "line" + std::to_string(std::get<0>(info.param) / 1024) +
                                  "k_seed" + std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace cachecore::testing
