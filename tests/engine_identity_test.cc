// Identity: a cache starts only with its own cache device, its own metadata
// store and its own origin, at its own line size. Anything else is refused
// with a message that says what differs, and nothing is written.
#include <gtest/gtest.h>

#include "cachecore/metadata/checksum.h"
#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kOrigin = 8 << 20;
constexpr uint64_t kCache = kDataOffset + (2 << 20);

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

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore("md");
    EngineConfig c;
    c.line_size = 64 * 1024;
    c.mode = CacheMode::kWriteBack;
    auto e = Engine::Create({origin_.get(), cache_.get(), store_.get()}, c, Replace::kNothing);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    ASSERT_TRUE(WritePattern(*e.value(), 0, 256 * 1024, 1).ok());
    ASSERT_TRUE(e.value()->Shutdown().ok());
  }

  std::unique_ptr<MetadataStore> OpenStore(const std::string& name) {
    MetadataOptions mo;
    mo.create_if_missing = true;
    auto s = MetadataStore::Open(dir_.path() + "/" + name, mo);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s.value());
  }

  // Opens with the given parts; expects a refusal mentioning `words` and
  // checks that no device changed.
  void ExpectRefused(BlockDevice* origin, BlockDevice* cache, MetadataStore* store,
                     const EngineConfig& config, StatusCode code, const std::string& words) {
    uint32_t before_o = DeviceDigest(*origin), before_c = DeviceDigest(*cache);
    auto e = Engine::Open({origin, cache, store}, config);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), code) << e.status().ToString();
    EXPECT_NE(e.status().message().find(words), std::string::npos) << e.status().message();
    EXPECT_EQ(DeviceDigest(*origin), before_o) << "origin changed";
    EXPECT_EQ(DeviceDigest(*cache), before_c) << "cache device changed";
  }

  TempDir dir_;
  std::unique_ptr<BlockDevice> origin_ = NewMemoryDevice(kOrigin, "origin");
  std::unique_ptr<BlockDevice> cache_ = NewMemoryDevice(kCache, "cache");
  std::unique_ptr<MetadataStore> store_;
};

TEST_F(IdentityTest, OpensWithItsOwnParts) {
  auto e = Engine::Open({origin_.get(), cache_.get(), store_.get()}, EngineConfig{});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e.value()->line_size(), 64u * 1024);
  EXPECT_TRUE(HasPattern(*e.value(), 0, 256 * 1024, 1));
}

TEST_F(IdentityTest, WrongCacheDeviceIsRefused) {
  auto other_cache = NewMemoryDevice(kCache, "other-cache");
  auto other_store = OpenStore("other");
  auto e = Engine::Create({origin_.get(), other_cache.get(), other_store.get()}, EngineConfig{}, Replace::kNothing);
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(e.value()->Shutdown().ok());
  ExpectRefused(origin_.get(), other_cache.get(), store_.get(), EngineConfig{},
                StatusCode::kMismatch, "cache UUID");
}

TEST_F(IdentityTest, WrongOriginIsRefused) {
  auto other = NewMemoryDevice(kOrigin, "other-origin");
  ExpectRefused(other.get(), cache_.get(), store_.get(), EngineConfig{}, StatusCode::kMismatch,
                "wrong origin: the cache belongs to mem:origin");
  auto bigger = NewMemoryDevice(2 * kOrigin, "origin");
  ExpectRefused(bigger.get(), cache_.get(), store_.get(), EngineConfig{}, StatusCode::kMismatch,
                "was made for an origin of 8388608 bytes");
}

TEST_F(IdentityTest, OtherLineSizeIsRefused) {
  EngineConfig c;
  c.line_size = 4096;
  ExpectRefused(origin_.get(), cache_.get(), store_.get(), c, StatusCode::kMismatch, "line size");
}

TEST_F(IdentityTest, EmptyStoreIsRefused) {
  auto empty = OpenStore("empty");
  ExpectRefused(origin_.get(), cache_.get(), empty.get(), EngineConfig{}, StatusCode::kMismatch,
                "metadata store holds no cache");
}

TEST_F(IdentityTest, BlankCacheDeviceIsNotACache) {
  auto blank = NewMemoryDevice(kCache, "blank");
  ExpectRefused(origin_.get(), blank.get(), store_.get(), EngineConfig{}, StatusCode::kNotFound,
                "holds no cachectl cache");
}

TEST_F(IdentityTest, DamagedSuperblockIsRefused) {
  AlignedBuffer sb(4096);
  ASSERT_TRUE(cache_->Read(0, sb.data(), 4096).ok());
  sb.data()[100] ^= 1;
  ASSERT_TRUE(cache_->Write(0, sb.data(), 4096).ok());
  ExpectRefused(origin_.get(), cache_.get(), store_.get(), EngineConfig{}, StatusCode::kCorruption,
                "checksum");
}

TEST_F(IdentityTest, FormattingOverACacheNeedsForceAndNeverDropsDirtyData) {
  uint32_t before = DeviceDigest(*cache_);
  auto again = Engine::Create({origin_.get(), cache_.get(), store_.get()}, EngineConfig{}, Replace::kNothing);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kBusy);
  EXPECT_NE(again.status().message().find("already holds cachectl cache"), std::string::npos);
  auto forced = Engine::Create({origin_.get(), cache_.get(), store_.get()}, EngineConfig{}, Replace::kCleanCache);
  ASSERT_FALSE(forced.ok());  // the cache holds 4 dirty lines
  EXPECT_NE(forced.status().message().find("dirty"), std::string::npos) << forced.status().message();
  EXPECT_EQ(DeviceDigest(*cache_), before);
  {
    auto e = Engine::Open({origin_.get(), cache_.get(), store_.get()}, EngineConfig{});
    ASSERT_TRUE(e.ok());
    ASSERT_TRUE(e.value()->Detach().ok());
  }
  auto clean = Engine::Create({origin_.get(), cache_.get(), store_.get()}, EngineConfig{}, Replace::kCleanCache);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_TRUE(HasPattern(*clean.value(), 0, 256 * 1024, 1));  // from the origin now
}

TEST_F(IdentityTest, ForceNeverDropsAnotherCachesDirtyData) {
  // The cache device holds dirty data of a cache whose store is elsewhere.
  auto other_store = OpenStore("other");
  uint32_t before = DeviceDigest(*cache_);
  auto e = Engine::Create({origin_.get(), cache_.get(), other_store.get()}, EngineConfig{}, Replace::kCleanCache);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kBusy);
  EXPECT_NE(e.status().message().find("has dirty data"), std::string::npos) << e.status().message();
  EXPECT_EQ(DeviceDigest(*cache_), before);
}

TEST_F(IdentityTest, BadGeometryIsRefused) {
  auto fresh_store = OpenStore("fresh");
  auto small = NewMemoryDevice(kDataOffset + 64 * 1024, "small");
  EngineConfig c;
  c.line_size = 64 * 1024;
  auto e = Engine::Create({origin_.get(), small.get(), fresh_store.get()}, c, Replace::kNothing);
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("too small"), std::string::npos);
  c.line_size = 3000;
  auto blank = NewMemoryDevice(kCache, "blank");
  e = Engine::Create({origin_.get(), blank.get(), fresh_store.get()}, c, Replace::kNothing);
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  c.line_size = 2 << 20;
  e = Engine::Create({origin_.get(), blank.get(), fresh_store.get()}, c, Replace::kNothing);
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  c.line_size = 4096;
  e = Engine::Create({origin_.get(), origin_.get(), fresh_store.get()}, c, Replace::kNothing);
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("same device"), std::string::npos);
}

}  // namespace
}  // namespace cachecore::testing
