// What `cachectl probe --write` refuses to destroy, the over-provisioning
// recommendation, the probe's figures on a memory device, and what attach
// --overprovision leaves unused (and discards) on the cache device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "cachecore/devices/memory_device.h"
#include "cachecore/planning/probe.h"
#include "cachecore/metadata/superblock.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kSize = 8 << 20;

class ContentsTest : public ::testing::Test {
 protected:
  ContentsTest() : dev_(NewMemoryDevice(kSize, "probe")) {}
  void Put(uint64_t at, const void* bytes, size_t len) {
    AlignedBuffer block(4096);
    uint64_t base = at / 4096 * 4096;
    ASSERT_TRUE(dev_->Read(base, block.data(), 4096).ok());
    std::memcpy(block.data() + (at - base), bytes, len);
    ASSERT_TRUE(dev_->Write(base, block.data(), 4096).ok());
  }
  std::string Contents() {
    Result<std::string> c = DescribeContents(*dev_);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *c : "?";
  }
  std::unique_ptr<BlockDevice> dev_;
};

TEST_F(ContentsTest, ABlankDeviceHoldsNothing) { EXPECT_EQ(Contents(), ""); }

TEST_F(ContentsTest, KnownSignaturesAreNamed) {
  const uint8_t ext[] = {0x53, 0xEF};
  Put(1080, ext, 2);
  EXPECT_EQ(Contents(), "an ext2/ext3/ext4 filesystem");
  dev_ = NewMemoryDevice(kSize, "probe");
  Put(0, "XFSB", 4);
  EXPECT_EQ(Contents(), "an XFS filesystem");
  dev_ = NewMemoryDevice(kSize, "probe");
  Put(512 * 2, "LABELONE", 8);
  EXPECT_EQ(Contents(), "an LVM physical volume");
  dev_ = NewMemoryDevice(kSize, "probe");
  Put(65600, "_BHRfS_M", 8);
  EXPECT_EQ(Contents(), "a btrfs filesystem");
  dev_ = NewMemoryDevice(kSize, "probe");
  const uint8_t boot[] = {0x55, 0xAA};
  Put(510, boot, 2);
  EXPECT_EQ(Contents(), "a boot sector or MBR partition table");
}

TEST(ProbeTest, AMemoryDeviceMeasuresAndKeepsItsDataWithoutWrite) {
  auto dev = NewMemoryDevice(kSize, "probe");
  AlignedBuffer block(4096);
  std::memset(block.data(), 0x42, 4096);
  ASSERT_TRUE(dev->Write(4096, block.data(), 4096).ok());
  ProbeOptions o;
  o.seconds_per_test = 0.1;
  o.queue_depth = 4;
  Result<ProbeResult> r = ProbeDevice(*dev, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->seq_read_mb_s, 0);
  EXPECT_GT(r->rand_read_iops, 0);
  EXPECT_FALSE(r->seq_write_mb_s.has_value());
  AlignedBuffer back(4096);
  ASSERT_TRUE(dev->Read(4096, back.data(), 4096).ok());
  EXPECT_EQ(std::memcmp(back.data(), block.data(), 4096), 0);
  o.write = true;
  r = ProbeDevice(*dev, o);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(*r->rand_write_iops, 0);
}

TEST(ProbeTest, TheRecommendationIsTheLeastShareNearTheBest) {
  std::vector<OverprovisionPoint> points = {{0, 50000}, {10, 80000}, {20, 95000}, {30, 100000}};
  EXPECT_EQ(RecommendOverprovision(points), 20u);
  points = {{0, 100000}, {10, 99000}, {20, 101000}, {30, 100500}};
  EXPECT_EQ(RecommendOverprovision(points), 0u);
}

TEST(OverprovisionTest, AttachLeavesTheShareUnusedAndDiscardsIt) {
  RigOptions ro;
  ro.cache_data_size = 4 << 20;  // 64 lines of 64 KiB
  EngineRig rig(ro);
  const uint64_t tail = kDataOffset + (3 << 20);  // the last quarter of the data area
  AlignedBuffer junk(4096);
  std::memset(junk.data(), 0x77, 4096);
  ASSERT_TRUE(rig.raw_cache().Write(tail + 8192, junk.data(), 4096).ok());
  EngineConfig c;
  c.line_size = 64 << 10;
  c.overprovision_pct = 25;
  ASSERT_TRUE(rig.Create(c).ok());
  EXPECT_EQ(rig.engine().capacity_lines(), 48u);
  EXPECT_EQ(rig.engine().overprovisioned_bytes(), 1u << 20);
  ASSERT_TRUE(rig.raw_cache().Read(tail + 8192, junk.data(), 4096).ok());
  EXPECT_TRUE(std::all_of(junk.data(), junk.data() + 4096, [](uint8_t b) { return b == 0; }))
      << "the unused area was not discarded";
  ASSERT_TRUE(rig.Restart(c).ok());  // the superblock keeps the line count
  EXPECT_EQ(rig.engine().capacity_lines(), 48u);
  c.overprovision_pct = 91;
  EngineRig other(ro);
  Status refused = other.Create(c);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("at most 90 %"), std::string::npos) << refused.message();
}

}  // namespace
}  // namespace cachecore::testing
