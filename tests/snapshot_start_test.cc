// A start after a clean shutdown copies the slot table from the snapshot
// that shutdown wrote (MetadataStore::WriteSnapshot), and only then: the
// table it makes agrees with the records, block for block; a snapshot the
// store has moved past, a damaged one, or one left behind by a start that
// then crashed, is passed over for the records, with nothing lost.
#include <gtest/gtest.h>

#include <fstream>

#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

class SnapshotStartTest : public ::testing::TestWithParam<uint32_t> {
 protected:
  static constexpr uint64_t kLines = 32;
  void SetUp() override {
    config_.line_size = GetParam();
    config_.background_cleaner = false;
    config_.sequential_cutoff = 0;
    config_.mode = CacheMode::kWriteBack;
    ASSERT_TRUE(rig_.Create(config_).ok());
    Engine& e = rig_.engine();
    const uint64_t line = config_.line_size;
    ASSERT_TRUE(WritePattern(e, 0, kLines * line, 1).ok());
    ASSERT_TRUE(e.Flush().ok());                                   // clean, on the origin too
    ASSERT_TRUE(WritePattern(e, 4 * line, 4096, 2).ok());          // one block dirty again
    ASSERT_TRUE(WritePattern(e, 40 * line, 2 * line, 3).ok());     // new dirty lines
    ASSERT_TRUE(e.Discard(10 * line, line).ok());                  // a line gone
  }
  void ExpectData() {
    const uint64_t line = config_.line_size;
    Engine& e = rig_.engine();
    EXPECT_TRUE(HasPattern(e, 0, 4 * line, 1));
    EXPECT_TRUE(HasPattern(e, 4 * line, 4096, 2));
    if (line > 4096) {
      EXPECT_TRUE(HasPattern(e, 4 * line + 4096, line - 4096, 1));
    }
    EXPECT_TRUE(HasPattern(e, 5 * line, 5 * line, 1));
    EXPECT_TRUE(HasPattern(e, 11 * line, (kLines - 11) * line, 1));
    EXPECT_TRUE(HasPattern(e, 40 * line, line, 3));
  }
  void ShutDown() {
    ASSERT_TRUE(rig_.engine().Shutdown().ok());
    rig_.DropEngine();
  }
  std::string SnapshotPath() const { return rig_.metadata_path() + "/SNAPSHOT"; }
  EngineRig rig_;
  EngineConfig config_;
};

TEST_P(SnapshotStartTest, ACleanShutdownsSnapshotMakesTheTableTheRecordsWould) {
  const StatsSnapshot before = rig_.engine().stats();
  ShutDown();
  ASSERT_TRUE(rig_.Open(config_).ok());
  EXPECT_TRUE(rig_.engine().started_from_snapshot());
  Status agree = rig_.engine().CheckRecordsAgreeForTest();
  EXPECT_TRUE(agree.ok()) << agree.ToString();
  EXPECT_EQ(rig_.engine().stats().dirty_lines, before.dirty_lines);
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, before.occupancy_lines);
  ExpectData();
  // Each clean shutdown writes its own; the start used this one up.
  ASSERT_TRUE(WritePattern(rig_.engine(), 50 * config_.line_size, 4096, 4).ok());
  ShutDown();
  ASSERT_TRUE(rig_.Open(config_).ok());
  EXPECT_TRUE(rig_.engine().started_from_snapshot());
  EXPECT_TRUE(HasPattern(rig_.engine(), 50 * config_.line_size, 4096, 4));
  ExpectData();
  // What it wrote is durable as records: a flush now empties the cache of dirt.
  ASSERT_TRUE(rig_.engine().Flush().ok());
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 0u);
}

// A trim's record is never settled at a start (the origin's discard may
// follow it), nor is an announcement: a start from the records proves and
// rewrites them, so the clean shutdown puts them again for its sync to
// settle, and a start from the snapshot finds them rewritten.
TEST_P(SnapshotStartTest, ACleanShutdownLeavesNoRecordUnsettled) {
  const uint64_t line = config_.line_size;
  ASSERT_TRUE(rig_.engine().Discard(41 * line, 4096).ok());  // part of a dirty line, or all of it
  ShutDown();
  size_t records = 0;
  ASSERT_TRUE(rig_.store().ForEachLine([&](uint64_t slot, const LineRecord& r) {
    ++records;
    EXPECT_NE(r.epoch, kNoEpoch) << "slot " << slot << " (line " << r.origin_line << ")";
    return Status::Ok();
  }).ok());
  EXPECT_GT(records, 0u);
  ASSERT_TRUE(rig_.Open(config_).ok());
  EXPECT_TRUE(rig_.engine().started_from_snapshot());
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

// A store that fails at the shutdown's put of those records (a full disk)
// makes the shutdown not clean, and its sync still flushes the devices: a
// write-through write acknowledged without FUA is on the origin for good.
TEST_P(SnapshotStartTest, AFailedPutAtShutdownStillFlushesTheOrigin) {
  const uint64_t line = config_.line_size;
  ASSERT_TRUE(rig_.engine().SetMode(CacheMode::kWriteThrough).ok());
  ASSERT_TRUE(rig_.engine().Discard(20 * line, 4096).ok());  // a record to put again (16 KiB lines)
  ASSERT_TRUE(WritePattern(rig_.engine(), 100 * line, 4096, 7).ok());  // volatile on the origin
  rig_.store_fs().FailWrites(rocksdb::IOStatus::IOError("injected EIO"), rocksdb::IOStatus::OK());
  EXPECT_FALSE(rig_.engine().Shutdown().ok());
  rig_.store_fs().Heal();
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_TRUE(rig_.OriginHasPattern(100 * line, 4096, 7));
}

// The daemon opens the store with compactions held back, for the start's
// scan of the records; the start lets them run once it has read them
// (left off, level 0 would fill until RocksDB stopped every write).
TEST_P(SnapshotStartTest, AStartLetsTheStoreCompactAgain) {
  ShutDown();
  rig_.CloseStore();
  ASSERT_TRUE(rig_.OpenStore(/*defer_compactions=*/true).ok());
  EXPECT_TRUE(rig_.store().CompactionsDeferred());
  ASSERT_TRUE(rig_.Open(config_).ok());
  EXPECT_FALSE(rig_.store().CompactionsDeferred());
  ExpectData();
}

TEST_P(SnapshotStartTest, AStoreWrittenAfterTheSnapshotIsReadFromTheRecords) {
  ShutDown();
  ASSERT_TRUE(rig_.store().PutConfig("note", "written after the shutdown", true).ok());
  ASSERT_TRUE(rig_.Open(config_).ok());
  EXPECT_FALSE(rig_.engine().started_from_snapshot());
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  ExpectData();
}

TEST_P(SnapshotStartTest, ADamagedSnapshotIsPassedOverForTheRecords) {
  ShutDown();
  {
    std::fstream f(SnapshotPath(), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.is_open());
    // The flushes begun, the last part: any value of it would fit.
    f.seekg(0, std::ios::end);
    f.seekp(static_cast<std::streamoff>(f.tellg()) - 4 - 8);
    f.put('\x5a');
  }
  ASSERT_TRUE(rig_.Open(config_).ok());
  EXPECT_FALSE(rig_.engine().started_from_snapshot());
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  ExpectData();
}

// The start that used a snapshot removes it, and no longer says the last
// shutdown was clean: after a power cut the records are read (and the
// blocks written since are proven against the data).
TEST_P(SnapshotStartTest, AfterAPowerCutTheRecordsAreRead) {
  ShutDown();
  ASSERT_TRUE(rig_.Open(config_).ok());
  ASSERT_TRUE(rig_.engine().started_from_snapshot());
  ASSERT_TRUE(WritePattern(rig_.engine(), 60 * config_.line_size, 4096, 5).ok());
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kDropUnsynced).ok());
  EXPECT_FALSE(rig_.engine().started_from_snapshot());
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 60 * config_.line_size, 4096, 5));
  ExpectData();
}

INSTANTIATE_TEST_SUITE_P(LineSizes, SnapshotStartTest, ::testing::Values(4096u, 16384u));

// An origin of 2^33 lines (32 TiB, sparse in memory): lines past 2^32 take
// the fifth byte of PackedLines. Lines on both sides of 2^32 come back
// after a clean shutdown (the snapshot, with its high-bytes part), after a
// start from the records, and after a power cut.
TEST(WideOriginLinesTest, LinesPastTwoToThe32SurviveEveryKindOfStart) {
  RigOptions options;
  options.origin_size = (uint64_t{1} << 33) * 4096;
  EngineRig rig(options);
  EngineConfig config;
  config.line_size = 4096;
  config.background_cleaner = false;
  config.sequential_cutoff = 0;
  config.mode = CacheMode::kWriteBack;
  ASSERT_TRUE(rig.Create(config).ok());
  const uint64_t offsets[] = {0, (uint64_t{1} << 32) * 4096 - 4096, (uint64_t{1} << 32) * 4096,
                              ((uint64_t{1} << 33) - 1) * 4096};
  auto expect_all = [&](const char* after) {
    for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(HasPattern(rig.engine(), offsets[i], 4096, 10 + i)) << after;
    EXPECT_EQ(rig.engine().stats().dirty_lines, 4u) << after;
  };
  for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(WritePattern(rig.engine(), offsets[i], 4096, 10 + i).ok());
  ASSERT_TRUE(rig.engine().Sync().ok());
  ASSERT_TRUE(rig.Restart(config).ok());
  EXPECT_TRUE(rig.engine().started_from_snapshot());
  expect_all("a start from the snapshot");
  ASSERT_TRUE(rig.PowerCutAndReopen(config, PowerCutMode::kDropUnsynced).ok());
  EXPECT_FALSE(rig.engine().started_from_snapshot());
  expect_all("a start from the records after a power cut");
}

}  // namespace
}  // namespace cachecore::testing
