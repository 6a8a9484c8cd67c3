// The dirty-region map on the cache device: what it says about which origin
// ranges may be stale must cover every dirty line the store records, also
// after a power cut, and shrink once the lines are cleaned.
#include <gtest/gtest.h>

#include "cachecore/metadata/dirty_map.h"
#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t K = 1024;

bool Covers(const OriginRanges& ranges, uint64_t at, uint64_t len) {
  for (auto [start, n] : ranges) {
    if (at >= start && at + len <= start + n) return true;
  }
  return false;
}

class DirtyMapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.mode = CacheMode::kWriteBack;
    config_.line_size = 4096;
    config_.sequential_cutoff = 0;
    config_.background_cleaner = false;
    ASSERT_TRUE(rig_.Create(config_).ok());
  }
  OriginRanges Stale() {
    Result<OriginRanges> r = DirtyMap::ReadStaleRanges(&rig_.raw_cache(), rig_.engine().identity(), rig_.engine().identity().origin_size);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r.value() : OriginRanges{};
  }
  EngineRig rig_;
  EngineConfig config_;
};

TEST_F(DirtyMapTest, AFreshCacheHasNoStaleRange) { EXPECT_TRUE(Stale().empty()); }

TEST_F(DirtyMapTest, FlushedDirtyWritesAreCovered) {
  const uint64_t offsets[] = {0, 64 * K, 3 * 1024 * K, 8 * 1024 * K - 4 * K};
  for (uint64_t at : offsets) {
    ASSERT_TRUE(WritePattern(rig_.engine(), at, 4 * K, 1).ok());
  }
  // Before a flush the map need not say anything (nothing is promised);
  // once the flush returns it covers every dirty write.
  ASSERT_TRUE(rig_.engine().Sync().ok());
  OriginRanges stale = Stale();
  for (uint64_t at : offsets) EXPECT_TRUE(Covers(stale, at, 4 * K)) << at;
  EXPECT_FALSE(Covers(stale, 1024 * K, 4 * K)) << "a never-written region is reported";
}

TEST_F(DirtyMapTest, FlushClearsTheMap) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 128 * K, 16 * K, 1).ok());
  ASSERT_TRUE(rig_.engine().Sync().ok());
  ASSERT_FALSE(Stale().empty());
  ASSERT_TRUE(rig_.engine().Flush().ok());
  EXPECT_TRUE(Stale().empty());
}

TEST_F(DirtyMapTest, AfterAPowerCutTheMapCoversEveryDirtyRecord) {
  for (uint64_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(WritePattern(rig_.engine(), (i * 37 % 2000) * 4 * K, 4 * K, 2).ok());
    if (i % 16 == 0) {
      ASSERT_TRUE(rig_.engine().Sync().ok());
    }
  }
  ASSERT_TRUE(rig_.PowerCutAndReopen(config_, PowerCutMode::kKeepUnsynced).ok());
  OriginRanges stale = Stale();
  uint64_t dirty = 0;
  Status s = rig_.store().ForEachLine([&](uint64_t, const LineRecord& r) {
    bool any_dirty = false;
    for (BlockClass c : r.classes) {
      any_dirty |= c == BlockClass::kDirty || c == BlockClass::kDirtyFresh ||
                   c == BlockClass::kDirtyOverwritten;
    }
    if (!any_dirty) return Status::Ok();
    ++dirty;
    EXPECT_TRUE(Covers(stale, r.origin_line * 4 * K, 4 * K)) << "line " << r.origin_line;
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(dirty, 0u);
}

TEST_F(DirtyMapTest, ADamagedPageIsReportedNotTrusted) {
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * K, 1).ok());
  AlignedBuffer junk(4 * K);
  std::memset(junk.data(), 0x5A, 4 * K);
  ASSERT_TRUE(rig_.raw_cache().Write(kDirtyMapOffset, junk.data(), 4 * K).ok());
  Result<OriginRanges> r = DirtyMap::ReadStaleRanges(&rig_.raw_cache(), rig_.engine().identity(), rig_.engine().identity().origin_size);
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
}

// A region's bit is a bit, not a count: it is set by its first dirty line
// and cleared only when the caller says none is left, so a region with
// another dirty line stays stale whatever order lines are cleaned in.
TEST(DirtyMapBitsTest, ARegionStaysStaleWhileAnyOfItsLinesIsDirty) {
  CacheIdentity id;
  id.line_size = 4096;
  id.origin_size = uint64_t{kMaxDirtyRegions} * 4 * 4096;  // 4 lines a region
  DirtyMap map(id, id.origin_size);
  ASSERT_EQ(map.RegionLines(9), std::make_pair(uint64_t{8}, uint64_t{12}));
  auto region_bit = [&map] {
    auto pages = map.TakeChangedPages(/*all=*/true);
    return (pages.at(0).second.data()[8 + 2 / 8] >> (2 % 8)) & 1;  // region 2: lines 8..11
  };
  map.LineDirty(8);
  map.LineDirty(9);
  EXPECT_EQ(region_bit(), 1);
  map.LineClean(8, /*region_still_dirty=*/true);
  EXPECT_EQ(region_bit(), 1);
  map.LineClean(9, /*region_still_dirty=*/false);
  EXPECT_EQ(region_bit(), 0);
  map.LineDirty(11);
  EXPECT_EQ(region_bit(), 1);
}

}  // namespace
}  // namespace cachecore::testing
