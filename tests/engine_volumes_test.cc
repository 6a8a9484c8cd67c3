// One cache, several volumes: each volume's data goes to its own origin and
// never to another's; the slots are shared; a volume is removed (its dirty
// data on its origin first) while the others go on; bad requests change
// nothing; a crash at every step of add and remove loses nothing.
#include <gtest/gtest.h>

#include "cachecore/engine/steps.h"
#include "cachecore/metadata/volume_table.h"
#include "support/block_io.h"
#include "support/engine_rig.h"
#include "support/expected_state.h"
#include "support/stress_workload.h"

#include <chrono>
#include <thread>

namespace cachecore::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kLine = 64 * 1024;

EngineConfig WriteBack() {
  EngineConfig c;
  c.line_size = kLine;
  c.mode = CacheMode::kWriteBack;
  c.background_cleaner = false;  // dirty data stays until a flush or a removal
  c.sequential_cutoff = 0;
  return c;
}

// Whether `origin` holds, at its byte `at`, the pattern written through the
// cache at line-space offset `written_at` with `tag`.
::testing::AssertionResult OriginHolds(BlockDevice& origin, uint64_t at, uint64_t len, uint64_t written_at,
                                       uint32_t tag) {
  AlignedBuffer got(len), want(len);
  Status s = origin.Read(at, got.data(), len);
  if (!s.ok()) return ::testing::AssertionFailure() << s.ToString();
  FillPattern(want.data(), written_at, len, tag);
  if (std::memcmp(got.data(), want.data(), len) != 0) return ::testing::AssertionFailure() << "differs";
  return ::testing::AssertionSuccess();
}

class EngineVolumesTest : public ::testing::Test {
 protected:
  EngineVolumesTest() : rig_(Options()) {}
  static RigOptions Options() {
    RigOptions o;
    o.origin_size = 8 * kMiB;
    o.cache_data_size = 2 * kMiB;  // 32 lines
    return o;
  }
  void SetUp() override {
    ASSERT_TRUE(rig_.Create(WriteBack()).ok());
    rig_.AddOrigin("vol1", 4 * kMiB);
    Result<VolumeInfo> v = rig_.engine().AddVolume("vol1", &rig_.extra_origin("vol1"));
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    base1_ = v->base;
  }
  VolumeInfo Info(const std::string& name) {
    Result<VolumeInfo> v = rig_.engine().volume(name);
    EXPECT_TRUE(v.ok()) << name;
    return v.ok() ? v.value() : VolumeInfo{};
  }
  EngineRig rig_;
  uint64_t base1_ = 0;
};

TEST_F(EngineVolumesTest, ASecondVolumeLiesPastTheFirstWithAGap) {
  std::vector<VolumeInfo> all = rig_.engine().volumes();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "vol0");
  EXPECT_EQ(all[0].base, 0u);
  EXPECT_EQ(all[1].name, "vol1");
  EXPECT_EQ(all[1].size, 4 * kMiB);
  EXPECT_GE(base1_, 8 * kMiB + 65536 * kLine);  // past vol0 and a whole alignment
  EXPECT_EQ(base1_ % (65536 * kLine), 0u);
  // A request across a volume's end, or in the gap, is refused.
  AlignedBuffer b(8192);
  EXPECT_EQ(rig_.engine().Read(8 * kMiB - 4096, b.data(), 8192).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(rig_.engine().Read(8 * kMiB, b.data(), 4096).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(rig_.engine().Read(base1_ + 4 * kMiB - 4096, b.data(), 8192).code(), StatusCode::kOutOfRange);
}

TEST_F(EngineVolumesTest, EachVolumesDataReachesItsOwnOriginOnly) {
  Engine& e = rig_.engine();
  ASSERT_TRUE(WritePattern(e, 0, kMiB, 1).ok());
  ASSERT_TRUE(WritePattern(e, base1_, kMiB, 2).ok());
  EXPECT_TRUE(HasPattern(e, 0, kMiB, 1));
  EXPECT_TRUE(HasPattern(e, base1_, kMiB, 2));
  EXPECT_GT(Info("vol0").dirty_lines, 0u);
  EXPECT_GT(Info("vol1").dirty_lines, 0u);
  ASSERT_TRUE(e.Flush().ok());
  EXPECT_TRUE(OriginHolds(rig_.raw_origin(), 0, kMiB, 0, 1));
  EXPECT_TRUE(OriginHolds(rig_.extra_origin("vol1"), 0, kMiB, base1_, 2));
  // vol0's origin past its first MiB was never written: still zeros.
  AlignedBuffer z(kMiB), zeros(kMiB);
  ASSERT_TRUE(rig_.raw_origin().Read(kMiB, z.data(), kMiB).ok());
  EXPECT_EQ(std::memcmp(z.data(), zeros.data(), kMiB), 0);
  EXPECT_EQ(Info("vol1").dirty_lines, 0u);
  EXPECT_TRUE(e.CheckRecordsAgreeForTest().ok());
}

TEST_F(EngineVolumesTest, CountersAreKeptPerVolume) {
  Engine& e = rig_.engine();
  ASSERT_TRUE(WritePattern(e, base1_, 4 * kLine, 3).ok());
  AlignedBuffer b(4 * kLine);
  ASSERT_TRUE(e.Read(base1_, b.data(), 4 * kLine).ok());  // hits
  ASSERT_TRUE(e.Read(kMiB, b.data(), kLine).ok());         // a miss on vol0
  const VolumeInfo v0 = Info("vol0"), v1 = Info("vol1");
  EXPECT_EQ(v1.write_requests, 1u);
  EXPECT_EQ(v1.read_requests, 1u);
  EXPECT_EQ(v1.read_hits, 4 * kLine / 4096);
  EXPECT_EQ(v1.read_misses, 0u);
  EXPECT_EQ(v0.read_misses, kLine / 4096);
  EXPECT_EQ(v0.write_requests, 0u);
  EXPECT_EQ(v1.occupancy_lines, 4u);
  EXPECT_EQ(v0.occupancy_lines + v1.occupancy_lines, e.stats().occupancy_lines);
}

TEST_F(EngineVolumesTest, ABusyVolumeUsesTheSpaceAnIdleOneLeaves) {
  Engine& e = rig_.engine();
  AlignedBuffer b(4 * kMiB);
  for (int pass = 0; pass < 3; ++pass) ASSERT_TRUE(e.Read(base1_, b.data(), 4 * kMiB).ok());
  EXPECT_GT(Info("vol1").occupancy_lines, e.capacity_lines() * 3 / 4);
}

TEST_F(EngineVolumesTest, BadAddsChangeNothing) {
  Engine& e = rig_.engine();
  rig_.AddOrigin("odd", 4 * kMiB + 512);
  EXPECT_EQ(e.AddVolume("vol1", &rig_.AddOrigin("vol1b", kMiB)).status().code(), StatusCode::kBusy);
  EXPECT_EQ(e.AddVolume("again", &rig_.extra_origin("vol1")).status().code(), StatusCode::kBusy);  // cached already
  EXPECT_EQ(e.AddVolume("again", &rig_.origin()).status().code(), StatusCode::kBusy);
  EXPECT_EQ(e.AddVolume("self", &rig_.cache()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.AddVolume("odd", &rig_.extra_origin("odd")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.volumes().size(), 2u);
  ASSERT_TRUE(rig_.Restart(WriteBack()).ok());
  EXPECT_EQ(rig_.engine().volumes().size(), 2u);
}

TEST_F(EngineVolumesTest, VolumesComeBackAfterARestartAndAPowerCut) {
  ASSERT_TRUE(WritePattern(rig_.engine(), base1_, kMiB, 4, /*fua=*/true).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, kMiB, 5, /*fua=*/true).ok());
  ASSERT_TRUE(rig_.Restart(WriteBack()).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), base1_, kMiB, 4));
  ASSERT_TRUE(rig_.PowerCutAndReopen(WriteBack(), PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), base1_, kMiB, 4));
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, kMiB, 5));
  EXPECT_EQ(Info("vol1").base, base1_);
  EXPECT_GT(Info("vol1").dirty_lines, 0u);  // the dirty data stayed in the cache
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

TEST_F(EngineVolumesTest, AStartWithoutAVolumesOriginIsRefused) {
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  EngineDevices d = rig_.devices();
  d.volumes.pop_back();  // vol1's origin missing
  Result<std::unique_ptr<Engine>> e = Engine::Open(d, WriteBack());
  ASSERT_EQ(e.status().code(), StatusCode::kMismatch);
  EXPECT_NE(e.status().message().find("vol1"), std::string::npos) << e.status().ToString();
}

TEST_F(EngineVolumesTest, RemovingAVolumeCleansItAndLeavesTheOthersCached) {
  Engine& e = rig_.engine();
  ASSERT_TRUE(WritePattern(e, 0, 4 * kLine, 6).ok());
  ASSERT_TRUE(WritePattern(e, base1_, 8 * kLine, 7).ok());
  const uint64_t vol0_lines = Info("vol0").occupancy_lines;
  ASSERT_TRUE(e.RemoveVolume("vol1").ok());
  EXPECT_TRUE(OriginHolds(rig_.extra_origin("vol1"), 0, 8 * kLine, base1_, 7));
  EXPECT_EQ(e.volumes().size(), 1u);
  EXPECT_EQ(e.stats().occupancy_lines, vol0_lines);  // vol0's lines, dirty still, untouched
  EXPECT_EQ(Info("vol0").dirty_lines, 4u);
  AlignedBuffer b(4096);
  EXPECT_EQ(e.Read(base1_, b.data(), 4096).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(e.RemoveVolume("vol0").code(), StatusCode::kBusy);  // the last: detach instead
  EXPECT_EQ(e.RemoveVolume("vol1").code(), StatusCode::kNotFound);
  EXPECT_TRUE(e.CheckRecordsAgreeForTest().ok());
  rig_.ForgetOrigin("vol1");
  ASSERT_TRUE(rig_.Restart(WriteBack()).ok());
  EXPECT_EQ(rig_.engine().volumes().size(), 1u);
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 4 * kLine, 6));
}

TEST_F(EngineVolumesTest, FlushingOneVolumeCleansItAloneAndKeepsItServed) {
  Engine& e = rig_.engine();
  ASSERT_TRUE(WritePattern(e, 0, 4 * kLine, 8).ok());
  ASSERT_TRUE(WritePattern(e, base1_, 8 * kLine, 9).ok());
  ASSERT_TRUE(e.FlushVolume("vol1").ok());
  EXPECT_EQ(Info("vol1").dirty_lines, 0u);
  EXPECT_EQ(Info("vol1").occupancy_lines, 8u);  // cleaned, still cached
  EXPECT_TRUE(OriginHolds(rig_.extra_origin("vol1"), 0, 8 * kLine, base1_, 9));
  EXPECT_EQ(Info("vol0").dirty_lines, 4u);  // the other volume's dirty data stays dirty
  EXPECT_TRUE(HasPattern(e, base1_, 8 * kLine, 9));
  ASSERT_TRUE(WritePattern(e, base1_, kLine, 10).ok());  // still taking requests
  EXPECT_EQ(e.FlushVolume("nope").code(), StatusCode::kNotFound);
  EXPECT_TRUE(e.CheckRecordsAgreeForTest().ok());
}

TEST_F(EngineVolumesTest, EvictingAVolumeCleansAndDropsItAloneAndKeepsItServed) {
  Engine& e = rig_.engine();
  ASSERT_TRUE(WritePattern(e, 0, 4 * kLine, 11).ok());
  ASSERT_TRUE(WritePattern(e, base1_, 8 * kLine, 12).ok());
  ASSERT_TRUE(e.EvictVolume("vol1").ok());
  EXPECT_EQ(Info("vol1").occupancy_lines, 0u);
  EXPECT_TRUE(OriginHolds(rig_.extra_origin("vol1"), 0, 8 * kLine, base1_, 12));
  EXPECT_EQ(Info("vol0").dirty_lines, 4u);  // the other volume untouched
  // Written around the cache meanwhile: the volume reads its origin's data.
  AlignedBuffer newer(kLine);
  FillPattern(newer.data(), base1_, kLine, 13);
  ASSERT_TRUE(rig_.extra_origin("vol1").Write(0, newer.data(), kLine).ok());
  EXPECT_TRUE(HasPattern(e, base1_, kLine, 13));
  EXPECT_EQ(e.EvictVolume("nope").code(), StatusCode::kNotFound);
  EXPECT_TRUE(e.CheckRecordsAgreeForTest().ok());
}

TEST_F(EngineVolumesTest, TheFirstVolumeCanGoWhileAnotherStays) {
  Engine& e = rig_.engine();
  ASSERT_TRUE(WritePattern(e, 0, 2 * kLine, 8).ok());
  ASSERT_TRUE(WritePattern(e, base1_, 2 * kLine, 9).ok());
  ASSERT_TRUE(e.RemoveVolume("vol0").ok());
  EXPECT_TRUE(OriginHolds(rig_.raw_origin(), 0, 2 * kLine, 0, 8));
  rig_.ForgetOrigin("vol0");
  ASSERT_TRUE(rig_.Restart(WriteBack()).ok());
  ASSERT_EQ(rig_.engine().volumes().size(), 1u);
  EXPECT_TRUE(HasPattern(rig_.engine(), base1_, 2 * kLine, 9));
  // The space vol0 left is taken by the next volume added.
  Result<VolumeInfo> v = rig_.engine().AddVolume("vol2", &rig_.AddOrigin("vol2", kMiB));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->base, 0u);
}

// Clients of vol1 keep reading, writing, trimming, syncing (and their
// manager switching modes and flushing) while vol0, dirty, is removed.
TEST_F(EngineVolumesTest, RemovingOneVolumeUnderLoadOnAnotherLosesNothingOfEither) {
  constexpr uint64_t kSector = 512;
  Engine& e = rig_.engine();
  ASSERT_TRUE(WritePattern(e, 0, 16 * kLine, 14).ok());  // vol0's data, dirty in the cache
  ExpectedState model(4 * kMiB / kSector);
  FailureLog failures;
  std::atomic<uint64_t> next_id{1};
  WorkloadOptions wo;
  wo.clients = 3;
  wo.line_size = kLine;
  wo.hot_bytes = kMiB;
  wo.volume_base = base1_;
  StressWorkload load(e, model, failures, next_id, wo);
  auto run_until = [&](uint64_t ops) {
    while (load.ops_done() < ops && !failures.failed()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  };
  load.Start();
  run_until(200);
  const Status removed = e.RemoveVolume("vol0");
  run_until(load.ops_done() + 200);
  load.Stop();
  ASSERT_FALSE(failures.failed()) << failures.first();
  ASSERT_TRUE(removed.ok()) << removed.ToString();
  EXPECT_TRUE(OriginHolds(rig_.raw_origin(), 0, 16 * kLine, 0, 14));
  EXPECT_TRUE(e.CheckRecordsAgreeForTest().ok());
  rig_.ForgetOrigin("vol0");
  ASSERT_TRUE(rig_.Restart(WriteBack()).ok());
  model.ShutdownCompleted();
  AlignedBuffer buffer(kLine);
  for (uint64_t first = 0; first < model.sectors(); first += kLine / kSector) {
    ASSERT_TRUE(rig_.engine().Read(base1_ + first * kSector, buffer.data(), kLine).ok());
    for (uint64_t i = 0; i < kLine / kSector; ++i) {
      std::optional<uint64_t> got = ReadStamp(buffer.data() + i * kSector, first + i);
      ASSERT_TRUE(got.has_value()) << "sector " << first + i << " holds data never written to it";
      std::optional<std::string> why = model.CheckRecovered(first + i, *got);
      ASSERT_FALSE(why.has_value()) << "sector " << first + i << ": " << *why;
    }
  }
}

TEST_F(EngineVolumesTest, AVolumesOwnCutoffOverridesTheCachesAndIsSaved) {
  Engine& e = rig_.engine();
  ASSERT_TRUE(e.SetSequentialCutoff(256 * 1024).ok());
  ASSERT_TRUE(e.SetVolumeCutoff("vol1", 0).ok());  // vol1 caches streams
  EXPECT_EQ(e.SetVolumeCutoff("nope", 0).code(), StatusCode::kNotFound);
  AlignedBuffer b(128 * 1024);
  for (uint64_t at = 0; at < kMiB; at += b.size()) {  // 16 lines each, of 32
    ASSERT_TRUE(e.Read(at, b.data(), b.size()).ok());
    ASSERT_TRUE(e.Read(base1_ + at, b.data(), b.size()).ok());
  }
  EXPECT_EQ(Info("vol1").occupancy_lines, kMiB / kLine);
  EXPECT_LE(Info("vol0").occupancy_lines, 256 * 1024 / kLine);  // past the cutoff it bypassed
  ASSERT_TRUE(rig_.Restart(WriteBack()).ok());
  EXPECT_EQ(Info("vol1").sequential_cutoff, std::optional<uint64_t>(0));
  EXPECT_EQ(Info("vol0").sequential_cutoff, std::nullopt);
}

TEST(VolumeTableTest, EncodesAndDecodesEveryField) {
  std::vector<VolumeRecord> t = {{0, "db", 0, 4096, "/dev/sdb", VolumeRecord::State::kActive, std::nullopt},
                                 {3, "my vol", 1 << 30, 8192, "/srv/a b.img", VolumeRecord::State::kRemoving, 0}};
  Result<std::vector<VolumeRecord>> back = DecodeVolumeTable(EncodeVolumeTable(t));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].name, "my vol");
  EXPECT_EQ((*back)[1].origin_identity, "/srv/a b.img");
  EXPECT_EQ((*back)[1].state, VolumeRecord::State::kRemoving);
  EXPECT_EQ((*back)[1].sequential_cutoff, std::optional<uint64_t>(0));
  EXPECT_EQ((*back)[0].sequential_cutoff, std::nullopt);
  EXPECT_EQ(LineSpaceBytes(back.value()), (1u << 30) + 8192);
  EXPECT_EQ(DecodeVolumeTable("").status().code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeVolumeTable("0 0 4096 active - x").status().code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeVolumeTable("0 0 4096 gone - x\t/o").status().code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeVolumeTable("0 0 4096 active 12x x\t/o").status().code(), StatusCode::kCorruption);
}

// ---- a crash at each step of add and remove

EngineRig* crash_rig = nullptr;
const char* crash_step = nullptr;

void FreezeAtStep(const char* step) {
  if (crash_rig != nullptr && crash_step != nullptr && std::string(step) == crash_step) {
    crash_rig->Freeze();
    crash_step = nullptr;
  }
}

class VolumeCrashStepTest : public EngineVolumesTest, public ::testing::WithParamInterface<const char*> {
 protected:
  void TearDown() override {
    SetStepObserver(nullptr);
    crash_rig = nullptr;
  }
  void ArmCrash() {
    crash_rig = &rig_;
    crash_step = GetParam();
    SetStepObserver(FreezeAtStep);
  }
};

// A removal cleans without the volume lock: volumes() (stats) answers in
// the middle of it, and says the volume is being removed.
Engine* observed_engine = nullptr;
bool seen_removing = false;
void LookDuringRemoval(const char* step) {
  if (observed_engine == nullptr || std::string(step) != "remove-1-marked") return;
  for (const VolumeInfo& v : observed_engine->volumes()) seen_removing |= v.name == "vol1" && v.removing;
}

TEST_F(EngineVolumesTest, VolumesAnswerWhileARemovalCleans) {
  ASSERT_TRUE(WritePattern(rig_.engine(), base1_, 4 * kLine, 15).ok());
  observed_engine = &rig_.engine();
  SetStepObserver(LookDuringRemoval);
  const Status removed = rig_.engine().RemoveVolume("vol1");
  SetStepObserver(nullptr);
  observed_engine = nullptr;
  ASSERT_TRUE(removed.ok()) << removed.ToString();
  EXPECT_TRUE(seen_removing);
}

class AddCrashStepTest : public VolumeCrashStepTest {};
class RemoveCrashStepTest : public VolumeCrashStepTest {};

TEST_P(AddCrashStepTest, LosesNothing) {
  ASSERT_TRUE(WritePattern(rig_.engine(), base1_, 2 * kLine, 10, true).ok());
  rig_.AddOrigin("vol2", 2 * kMiB);
  ArmCrash();
  (void)rig_.engine().AddVolume("vol2", &rig_.extra_origin("vol2"));
  ASSERT_TRUE(rig_.PowerCutAndReopen(WriteBack(), PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), base1_, 2 * kLine, 10));
  const size_t n = rig_.engine().volumes().size();
  EXPECT_EQ(n, 3u);  // the table was saved, synced, before the first step
  Result<VolumeInfo> v2 = rig_.engine().volume("vol2");
  ASSERT_TRUE(v2.ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), v2->base, kLine, 11).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), v2->base, kLine, 11));
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

TEST_P(RemoveCrashStepTest, LosesNothing) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 2 * kLine, 12, true).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), base1_, 4 * kLine, 13, true).ok());
  ArmCrash();
  (void)rig_.engine().RemoveVolume("vol1");
  ASSERT_TRUE(rig_.PowerCutAndReopen(WriteBack(), PowerCutMode::kDropUnsynced).ok());
  Engine& e = rig_.engine();
  EXPECT_TRUE(HasPattern(e, 0, 2 * kLine, 12));
  Result<VolumeInfo> v1 = e.volume("vol1");
  if (v1.ok()) {
    // Cut short: the volume refuses requests until its removal finishes.
    ASSERT_TRUE(v1->removing);
    AlignedBuffer b(4096);
    EXPECT_EQ(e.Read(base1_, b.data(), 4096).code(), StatusCode::kBusy);
    ASSERT_TRUE(e.RemoveVolume("vol1").ok());
  }
  EXPECT_EQ(e.volumes().size(), 1u);
  EXPECT_TRUE(OriginHolds(rig_.extra_origin("vol1"), 0, 4 * kLine, base1_, 13));
  EXPECT_TRUE(e.CheckRecordsAgreeForTest().ok());
}

std::string StepName(const ::testing::TestParamInfo<const char*>& info) {
  std::string n = info.param;
  for (char& c : n) c = c == '-' ? '_' : c;
  return n;
}

INSTANTIATE_TEST_SUITE_P(Steps, AddCrashStepTest, ::testing::Values("add-1-table-saved", "add-2-line-space-saved"),
                         StepName);
INSTANTIATE_TEST_SUITE_P(Steps, RemoveCrashStepTest,
                         ::testing::Values("remove-1-marked", "remove-2-dropped", "remove-3-forgotten"), StepName);

}  // namespace
}  // namespace cachecore::testing
