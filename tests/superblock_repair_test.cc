// Superblock repair: a superblock that fails its checksum on a cache whose
// metadata store is intact is rewritten from the store, and the cache opens
// with its dirty data (as after a crash: the clean-shutdown flag was lost).
// Anything that is not recognisably a damaged cachectl superblock of this
// store's cache is refused, and nothing is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "cachecore/metadata/check.h"
#include "cachecore/metadata/checksum.h"
#include "cachecore/metadata/superblock.h"
#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kDirtyBytes = 512 * 1024;  // written back, never cleaned
constexpr uint64_t kRewritten = 128 * 1024;   // its first part, written again

uint32_t DeviceDigest(BlockDevice& d) {
  AlignedBuffer b(1 << 20);
  uint32_t crc = 0;
  for (uint64_t off = 0; off < d.size_bytes(); off += b.size()) {
    uint64_t n = std::min<uint64_t>(b.size(), d.size_bytes() - off);
    EXPECT_TRUE(d.Read(off, b.data(), n).ok());
    crc = Crc32c(b.data(), n, crc);
  }
  return crc;
}

// Changes `len` bytes at `offset` of a 4 KiB page at `page` on `d`.
void Scribble(BlockDevice& d, uint64_t page, size_t offset, const void* bytes, size_t len) {
  AlignedBuffer b(4096);
  ASSERT_TRUE(d.Read(page, b.data(), 4096).ok());
  std::memcpy(b.data() + offset, bytes, len);
  ASSERT_TRUE(d.Write(page, b.data(), 4096).ok());
}

// Flips bits inside the checksummed area: in the origin identity, the line
// count and the reserved tail, leaving the magic and version whole.
void FlipSuperblockBits(BlockDevice& d) {
  AlignedBuffer b(4096);
  ASSERT_TRUE(d.Read(0, b.data(), 4096).ok());
  b.data()[60] ^= 0x10;
  b.data()[66] ^= 0x01;
  b.data()[2000] ^= 0xFF;
  ASSERT_TRUE(d.Write(0, b.data(), 4096).ok());
}

bool IsZero(BlockDevice& d, uint64_t offset, uint64_t len) {
  AlignedBuffer b(len);
  EXPECT_TRUE(d.Read(offset, b.data(), len).ok());
  for (uint64_t i = 0; i < len; ++i) {
    if (b.data()[i] != 0) return false;
  }
  return true;
}

class SuperblockRepairTest : public ::testing::Test {
 protected:
  SuperblockRepairTest() {
    config_.line_size = 4096;
    config_.mode = CacheMode::kWriteBack;
    config_.background_cleaner = false;  // the data stays dirty, on the cache alone
    config_.sequential_cutoff = 0;
  }

  // A write-back cache with dirty data, all of it flushed by the client:
  // some blocks written once, some rewritten after the flush (overwrite
  // records), then flushed again.
  void MakeDirtyCache() {
    ASSERT_TRUE(rig_.Create(config_).ok());
    ASSERT_TRUE(WritePattern(rig_.engine(), 0, kDirtyBytes, 1).ok());
    ASSERT_TRUE(rig_.engine().Sync().ok());
    ASSERT_TRUE(WritePattern(rig_.engine(), 0, kRewritten, 2).ok());
    ASSERT_TRUE(rig_.engine().Sync().ok());
    ASSERT_GT(rig_.engine().stats().dirty_lines, 0u);
  }

  // Every block as the client last wrote (and flushed) it.
  ::testing::AssertionResult HoldsTheDirtyData() {
    ::testing::AssertionResult rewritten = HasPattern(rig_.engine(), 0, kRewritten, 2);
    if (!rewritten) return rewritten;
    return HasPattern(rig_.engine(), kRewritten, kDirtyBytes - kRewritten, 1);
  }

  Result<std::optional<SuperblockRepair>> Repair(uint32_t line_size = 0) {
    return RepairSuperblock(&rig_.cache(), &rig_.origin(), &rig_.store(), line_size);
  }

  // Expects a refusal naming `words`, with both devices unchanged.
  void ExpectRepairRefused(const std::string& words, uint32_t line_size = 0) {
    uint32_t cache_before = DeviceDigest(rig_.raw_cache()), origin_before = DeviceDigest(rig_.raw_origin());
    auto r = Repair(line_size);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
    EXPECT_NE(r.status().message().find("fails its checksum and is not rewritten"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
    EXPECT_EQ(DeviceDigest(rig_.raw_cache()), cache_before) << "the cache device changed";
    EXPECT_EQ(DeviceDigest(rig_.raw_origin()), origin_before) << "the origin changed";
    EXPECT_FALSE(rig_.Open(config_).ok()) << "opened over a superblock left damaged";
  }

  // Expects no repair and Open's own refusal, with nothing written.
  void ExpectNotACache() {
    uint32_t cache_before = DeviceDigest(rig_.raw_cache());
    auto r = Repair();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->has_value());
    Status open = rig_.Open(config_);
    EXPECT_EQ(open.code(), StatusCode::kNotFound) << open.ToString();
    EXPECT_NE(open.message().find("holds no cachectl cache"), std::string::npos) << open.message();
    EXPECT_EQ(DeviceDigest(rig_.raw_cache()), cache_before) << "the cache device changed";
  }

  EngineRig rig_;
  EngineConfig config_;
};

TEST_F(SuperblockRepairTest, RewritesFromTheStoreAndKeepsDirtyDataAfterCleanShutdown) {
  MakeDirtyCache();
  const Uuid uuid = rig_.engine().identity().uuid;
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  FlipSuperblockBits(rig_.raw_cache());
  ASSERT_EQ(rig_.Open(config_).code(), StatusCode::kCorruption);  // Open alone never repairs

  uint32_t before = DeviceDigest(rig_.raw_cache());
  auto plan = PlanSuperblockRepair(&rig_.cache(), &rig_.origin(), &rig_.store(), 4096);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(plan->has_value());
  EXPECT_EQ(DeviceDigest(rig_.raw_cache()), before) << "planning wrote";

  auto r = Repair(4096);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  const std::string& message = r->value().message;
  EXPECT_NE(message.find("the superblock on mem:cache failed its checksum; rewritten from the metadata "
                         "store (cache UUID " + UuidToString(uuid) + ")"),
            std::string::npos) << message;
  EXPECT_NE(message.find("the damaged copy had a wrong origin, line count"), std::string::npos) << message;
  EXPECT_EQ(message, plan->value().message);

  Result<Superblock> sb = ReadSuperblock(&rig_.raw_cache());
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  EXPECT_TRUE(DescribeIdentityDifference(sb->identity, rig_.store().GetIdentity().value(), "a", "b").empty());
  EXPECT_FALSE(sb->clean_shutdown) << "the flag was lost: the next open must take the crash path";
  EXPECT_TRUE(sb->dirty_at_shutdown);

  ASSERT_TRUE(rig_.Open(config_).ok());
  EXPECT_GT(rig_.engine().stats().dirty_lines, 0u);
  EXPECT_TRUE(HoldsTheDirtyData());
  EXPECT_TRUE(IsZero(rig_.raw_origin(), 0, kDirtyBytes)) << "the data came from the origin, not the cache";
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  Result<CheckReport> check = CheckCache(&rig_.origin(), &rig_.cache(), &rig_.store());
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  EXPECT_TRUE(check->problems.empty()) << check->problems.front();
  EXPECT_TRUE(check->clean_shutdown);
  auto again = Repair();
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->has_value()) << "a whole superblock is left alone";
}

class SuperblockRepairAfterCrashTest : public SuperblockRepairTest,
                                       public ::testing::WithParamInterface<PowerCutMode> {};

TEST_P(SuperblockRepairAfterCrashTest, KeepsEveryFlushedBlock) {
  MakeDirtyCache();
  // After the last flush: written, never flushed; may land or not.
  constexpr uint64_t kLate = 1 << 20;
  ASSERT_TRUE(WritePattern(rig_.engine(), kLate, 64 * 1024, 3).ok());
  FlipSuperblockBits(rig_.raw_cache());
  Status reopened = rig_.PowerCutAndReopen(config_, GetParam());
  ASSERT_EQ(reopened.code(), StatusCode::kCorruption) << reopened.ToString();

  auto r = Repair();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  ASSERT_TRUE(rig_.Open(config_).ok());
  EXPECT_TRUE(HoldsTheDirtyData());
  // Each late block: its new data or the origin's zeros, whole.
  AlignedBuffer got(4096), want(4096);
  for (uint64_t at = kLate; at < kLate + 64 * 1024; at += 4096) {
    ASSERT_TRUE(rig_.engine().Read(at, got.data(), 4096).ok());
    FillPattern(want.data(), at, 4096, 3);
    bool is_new = std::memcmp(got.data(), want.data(), 4096) == 0;
    bool is_zero = std::all_of(got.data(), got.data() + 4096, [](uint8_t c) { return c == 0; });
    EXPECT_TRUE(is_new || is_zero) << "block at " << at;
  }
}

INSTANTIATE_TEST_SUITE_P(PowerCutModes, SuperblockRepairAfterCrashTest,
                         ::testing::Values(PowerCutMode::kDropUnsynced, PowerCutMode::kTear,
                                           PowerCutMode::kKeepUnsynced),
                         [](const auto& info) {
                           switch (info.param) {
                             case PowerCutMode::kDropUnsynced: return "Drop";
                             case PowerCutMode::kTear: return "Tear";
                             default: return "Keep";
                           }
                         });

TEST_F(SuperblockRepairTest, ZeroedSuperblockIsNotACache) {
  MakeDirtyCache();
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  AlignedBuffer zeros(4096);
  ASSERT_TRUE(rig_.raw_cache().Write(0, zeros.data(), 4096).ok());
  ExpectNotACache();
}

TEST_F(SuperblockRepairTest, AnotherSignatureIsNotACache) {
  MakeDirtyCache();
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  Scribble(rig_.raw_cache(), 0, 0, "XFSB", 4);  // XFS's magic where ours was; the rest is ours
  ExpectNotACache();
}

TEST_F(SuperblockRepairTest, OtherFormatVersionIsRefused) {
  MakeDirtyCache();
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  const uint32_t version = kFormatVersion + 1;  // a newer format may keep its checksum elsewhere
  Scribble(rig_.raw_cache(), 0, 8, &version, 4);
  ExpectRepairRefused("its format version field reads " + std::to_string(kFormatVersion + 1));
}

TEST_F(SuperblockRepairTest, AnotherCachesStoreIsRefused) {
  MakeDirtyCache();
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  FlipSuperblockBits(rig_.raw_cache());
  // The store now describes another cache of the same origin and geometry.
  CacheIdentity other = rig_.store().GetIdentity().value();
  other.uuid = NewRandomUuid();
  ASSERT_TRUE(rig_.store().PutIdentity(other, true).ok());
  ExpectRepairRefused("is not that of cache " + UuidToString(other.uuid));
}

TEST_F(SuperblockRepairTest, BlankSyncMarkIsRefused) {
  MakeDirtyCache();
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  FlipSuperblockBits(rig_.raw_cache());
  AlignedBuffer zeros(kSyncMarkSize);
  ASSERT_TRUE(rig_.raw_cache().Write(kSyncMarkOffset, zeros.data(), kSyncMarkSize).ok());
  ExpectRepairRefused("is blank, so nothing on the device confirms it holds cache");
}

TEST_F(SuperblockRepairTest, StoreOlderThanTheSyncMarkIsRefused) {
  MakeDirtyCache();
  const Uuid uuid = rig_.engine().identity().uuid;
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  FlipSuperblockBits(rig_.raw_cache());
  AlignedBuffer mark(kSyncMarkSize);
  EncodeSyncMark(uuid, rig_.store().LatestSequence() + 1000, mark.data());
  ASSERT_TRUE(rig_.raw_cache().Write(kSyncMarkOffset, mark.data(), kSyncMarkSize).ok());
  ExpectRepairRefused("the store lost records, or is an older copy");
}

TEST_F(SuperblockRepairTest, WrongOriginOrLineSizeIsRefused) {
  MakeDirtyCache();
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  FlipSuperblockBits(rig_.raw_cache());
  ExpectRepairRefused("the store's line size is 4096, 65536 was asked for", 65536);
  auto other = NewMemoryDevice(rig_.origin().size_bytes(), "other-origin");
  uint32_t before = DeviceDigest(rig_.raw_cache());
  auto r = RepairSuperblock(&rig_.cache(), other.get(), &rig_.store(), 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the store's origin is mem:origin"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(DeviceDigest(rig_.raw_cache()), before);
}

}  // namespace
}  // namespace cachecore::testing
