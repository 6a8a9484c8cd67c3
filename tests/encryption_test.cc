// Encryption at rest: the key and what is derived from it, the encrypted
// cache device, and an engine over it in every mode (docs/design.md,
// "Encryption at rest").
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cachecore/crypto/cache_key.h"
#include "cachecore/crypto/encrypted_device.h"
#include "cachecore/devices/memory_device.h"
#include "cachecore/metadata/check.h"
#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore {
namespace {

using testing::EngineRig;
using testing::FillPattern;
using testing::HasPattern;
using testing::RigOptions;
using testing::WritePattern;

constexpr uint64_t kLine = 64 * 1024;
constexpr char kMarker[] = "PLAINTEXT-MARKER";  // 16 bytes, written over and over

std::shared_ptr<const CacheKey> KeyOf(char fill, size_t size = 64) {
  std::vector<uint8_t> secret(size, static_cast<uint8_t>(fill));
  Result<std::shared_ptr<const CacheKey>> key = CacheKey::FromSecret(secret.data(), secret.size());
  EXPECT_TRUE(key.ok()) << key.status().ToString();
  return key.ok() ? key.value() : nullptr;
}

void FillMarker(uint8_t* p, uint64_t len) {
  for (uint64_t i = 0; i < len; i += 16) std::memcpy(p + i, kMarker, 16);
}

// Whether any 16-byte-aligned window of `device` holds the marker.
bool HoldsMarker(BlockDevice& device) {
  AlignedBuffer chunk(1 << 20);
  for (uint64_t at = 0; at < device.size_bytes(); at += chunk.size()) {
    const uint64_t len = std::min<uint64_t>(chunk.size(), device.size_bytes() - at);
    if (!device.Read(at, chunk.data(), len).ok()) return true;  // cannot tell: say the worst
    for (uint64_t i = 0; i + 16 <= len; i += 16) {
      if (std::memcmp(chunk.data() + i, kMarker, 16) == 0) return true;
    }
  }
  return false;
}

TEST(CacheKeyTest, RefusesShortSecretsAndTellsKeysApart) {
  std::vector<uint8_t> short_secret(31, 7);
  EXPECT_EQ(CacheKey::FromSecret(short_secret.data(), short_secret.size()).status().code(),
            StatusCode::kInvalidArgument);
  Uuid uuid{};
  uuid[0] = 1;
  auto a = KeyOf('a'), a_again = KeyOf('a'), b = KeyOf('b');
  EXPECT_EQ(a->CheckValue(uuid), a_again->CheckValue(uuid));
  EXPECT_NE(a->CheckValue(uuid), b->CheckValue(uuid));
  Uuid other = uuid;
  other[0] = 2;
  EXPECT_NE(a->CheckValue(uuid), a->CheckValue(other));  // one key, two caches: two values
  // A sealed check depends on the key and the position, not on the CRC alone.
  EXPECT_NE(a->Seal(1234, 5), b->Seal(1234, 5));
  EXPECT_NE(a->Seal(1234, 5), a->Seal(1234, 6));
  EXPECT_EQ(a->Seal(1234, 5), a_again->Seal(1234, 5));
}

TEST(EncryptedDeviceTest, TheDataAreaHoldsCiphertextAndReadsBackPlain) {
  auto raw = NewMemoryDevice(4 << 20, "mem");
  auto dev = NewEncryptedDevice(raw.get(), KeyOf('k'), 1 << 20);
  AlignedBuffer plain(64 * 1024), back(64 * 1024);
  FillMarker(plain.data(), plain.size());
  ASSERT_TRUE(dev->Write(2 << 20, plain.data(), plain.size()).ok());
  EXPECT_FALSE(HoldsMarker(*raw));
  ASSERT_TRUE(dev->Read(2 << 20, back.data(), back.size()).ok());
  EXPECT_EQ(std::memcmp(plain.data(), back.data(), plain.size()), 0);
  // The caller's buffer stays plaintext.
  AlignedBuffer marker(64 * 1024);
  FillMarker(marker.data(), marker.size());
  EXPECT_EQ(std::memcmp(plain.data(), marker.data(), plain.size()), 0);
  // Asynchronously too.
  AsyncIo io;
  struct Done : IoCompletion {
    bool ran = false;
    void IoDone(AsyncIo&) override { ran = true; }
  } done;
  std::memset(back.data(), 0, back.size());
  io.request = {IoOp::kRead, 2 << 20, back.size(), back.data(), Status()};
  io.done = &done;
  dev->Submit(io);
  ASSERT_TRUE(done.ran);
  ASSERT_TRUE(io.request.status.ok());
  EXPECT_EQ(io.done, &done);
  EXPECT_EQ(std::memcmp(plain.data(), back.data(), plain.size()), 0);
  // Below the data area bytes pass as they are (the superblock).
  ASSERT_TRUE(dev->Write(0, plain.data(), 4096).ok());
  EXPECT_TRUE(HoldsMarker(*raw));
  // Not whole 4 KiB units in the data area: refused.
  EXPECT_EQ(dev->Write((2 << 20) + 512, plain.data(), 4096).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev->Write((1 << 20) - 4096, plain.data(), 8192).code(), StatusCode::kInvalidArgument);
}

TEST(EncryptedDeviceTest, OneBlockAtTwoPlacesIsTwoCiphertexts) {
  auto raw = NewMemoryDevice(4 << 20, "mem");
  auto dev = NewEncryptedDevice(raw.get(), KeyOf('k'), 1 << 20);
  AlignedBuffer plain(4096), c1(4096), c2(4096);
  FillMarker(plain.data(), plain.size());
  ASSERT_TRUE(dev->Write(1 << 20, plain.data(), 4096).ok());
  ASSERT_TRUE(dev->Write((1 << 20) + 4096, plain.data(), 4096).ok());
  ASSERT_TRUE(raw->Read(1 << 20, c1.data(), 4096).ok());
  ASSERT_TRUE(raw->Read((1 << 20) + 4096, c2.data(), 4096).ok());
  EXPECT_NE(std::memcmp(c1.data(), c2.data(), 4096), 0);  // the tweak is the position
}

class EncryptedEngineTest : public ::testing::TestWithParam<CacheMode> {
 protected:
  EncryptedEngineTest() : rig_(Options()) {}
  static RigOptions Options() {
    RigOptions o;
    o.origin_size = 8 << 20;
    o.cache_data_size = 4 << 20;
    return o;
  }
  EngineConfig Config(std::shared_ptr<const CacheKey> key) {
    EngineConfig c;
    c.line_size = kLine;
    c.mode = GetParam();
    c.sequential_cutoff = 0;
    c.key = std::move(key);
    return c;
  }
  // Writes the marker through the cache and reads it twice (cached).
  void WriteAndReadMarker(uint64_t at, uint64_t len) {
    AlignedBuffer b(len);
    FillMarker(b.data(), len);
    ASSERT_TRUE(rig_.engine().Write(at, b.data(), len).ok());
    for (int pass = 0; pass < 2; ++pass) {
      AlignedBuffer got(len);
      ASSERT_TRUE(rig_.engine().Read(at, got.data(), len).ok());
      ASSERT_EQ(std::memcmp(got.data(), b.data(), len), 0);
    }
  }
  EngineRig rig_;
};

TEST_P(EncryptedEngineTest, DataReadsBackAndTheCacheDeviceHoldsNoPlaintext) {
  ASSERT_TRUE(rig_.Create(Config(KeyOf('k'))).ok());
  WriteAndReadMarker(0, 1 << 20);
  ASSERT_TRUE(WritePattern(rig_.engine(), 2 << 20, 512 * 1024, 3).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 2 << 20, 512 * 1024, 3));
  if (GetParam() != CacheMode::kPassThrough && GetParam() != CacheMode::kWriteAround) {
    EXPECT_GT(rig_.engine().stats().occupancy_lines, 0u);
  }
  ASSERT_TRUE(rig_.engine().Flush().ok());
  ASSERT_TRUE(rig_.engine().Sync().ok());  // all of it on the devices themselves
  EXPECT_FALSE(HoldsMarker(rig_.raw_cache()));
  EXPECT_TRUE(HoldsMarker(rig_.raw_origin()));  // the origin is not the cache's to encrypt
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

TEST_P(EncryptedEngineTest, ARestartWithTheKeyIsWarmAndAnyOtherKeyIsRefused) {
  ASSERT_TRUE(rig_.Create(Config(KeyOf('k'))).ok());
  WriteAndReadMarker(0, 1 << 20);
  const uint64_t cached = rig_.engine().stats().occupancy_lines;
  EXPECT_EQ(rig_.Restart(Config(KeyOf('x'))).code(), StatusCode::kMismatch);
  rig_.CloseStore();
  ASSERT_TRUE(rig_.OpenStore().ok());
  EXPECT_EQ(rig_.Open(Config(nullptr)).code(), StatusCode::kMismatch);
  ASSERT_TRUE(rig_.Open(Config(KeyOf('k'))).ok());
  EXPECT_EQ(rig_.engine().stats().occupancy_lines, cached);
  const uint64_t hits = rig_.engine().stats().read_hits;
  WriteAndReadMarker(0, 1 << 20);
  if (cached > 0) {
    EXPECT_GT(rig_.engine().stats().read_hits, hits);
  }
  EXPECT_FALSE(HoldsMarker(rig_.raw_cache()));
}

TEST_P(EncryptedEngineTest, APowerCutKeepsEveryAcknowledgedWrite) {
  ASSERT_TRUE(rig_.Create(Config(KeyOf('k'))).ok());
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 1 << 20, 5, /*fua=*/true).ok());
  ASSERT_TRUE(rig_.PowerCutAndReopen(Config(KeyOf('k')), PowerCutMode::kTear).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 1 << 20, 5));
  EXPECT_TRUE(rig_.engine().CheckRecordsAgreeForTest().ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, EncryptedEngineTest,
                         ::testing::Values(CacheMode::kWriteThrough, CacheMode::kWriteBack, CacheMode::kWriteAround,
                                           CacheMode::kReadOnly, CacheMode::kPassThrough),
                         [](const ::testing::TestParamInfo<CacheMode>& info) {
                           std::string name = CacheModeName(info.param);
                           return name;
                         });

TEST(EncryptedCacheTest, WithoutEncryptionTheCacheDeviceHoldsThePlaintext) {
  // The scan above finds what it looks for: the same writes to a cache
  // that is not encrypted.
  EngineRig rig;
  EngineConfig c;
  c.line_size = kLine;
  c.sequential_cutoff = 0;
  ASSERT_TRUE(rig.Create(c).ok());
  AlignedBuffer b(kLine);
  FillMarker(b.data(), kLine);
  ASSERT_TRUE(rig.engine().Write(0, b.data(), kLine).ok());
  for (int pass = 0; pass < 2; ++pass) ASSERT_TRUE(rig.engine().Read(0, b.data(), kLine).ok());
  ASSERT_TRUE(rig.engine().Sync().ok());
  EXPECT_TRUE(HoldsMarker(rig.raw_cache()));
}

TEST(EncryptedCacheTest, AnEncryptedAttachLeavesNothingOfWhatTheDeviceHeld) {
  EngineRig rig;
  EngineConfig c;
  c.line_size = kLine;
  c.sequential_cutoff = 0;
  ASSERT_TRUE(rig.Create(c).ok());
  AlignedBuffer b(kLine);
  FillMarker(b.data(), kLine);
  ASSERT_TRUE(rig.engine().Write(0, b.data(), kLine).ok());
  ASSERT_TRUE(rig.engine().Flush().ok());
  ASSERT_TRUE(rig.engine().Shutdown().ok());
  ASSERT_TRUE(HoldsMarker(rig.raw_cache()));  // a clean cache's plaintext, left on the device
  c.key = KeyOf('k');
  ASSERT_TRUE(rig.Create(c, /*force=*/true).ok());
  EXPECT_FALSE(HoldsMarker(rig.raw_cache()));
}

TEST(EncryptedCacheTest, TheStoreAloneTellsAWrongKeyBeforeAnythingIsWritten) {
  EngineRig rig;
  EngineConfig c;
  c.line_size = kLine;
  c.key = KeyOf('k');
  ASSERT_TRUE(rig.Create(c).ok());
  EXPECT_TRUE(CheckKeyWithStore(&rig.store(), c.key.get()).ok());
  EXPECT_EQ(CheckKeyWithStore(&rig.store(), KeyOf('x').get()).code(), StatusCode::kMismatch);
  EXPECT_EQ(CheckKeyWithStore(&rig.store(), nullptr).code(), StatusCode::kMismatch);
  EngineRig plain;
  c.key = nullptr;
  ASSERT_TRUE(plain.Create(c).ok());
  EXPECT_TRUE(CheckKeyWithStore(&plain.store(), nullptr).ok());
  EXPECT_EQ(CheckKeyWithStore(&plain.store(), KeyOf('k').get()).code(), StatusCode::kMismatch);
}

TEST(EncryptedCacheTest, ACacheWithoutEncryptionRefusesAKey) {
  EngineRig rig;
  EngineConfig c;
  c.line_size = kLine;
  ASSERT_TRUE(rig.Create(c).ok());
  c.key = KeyOf('k');
  EXPECT_EQ(rig.Restart(c).code(), StatusCode::kMismatch);
}

TEST(EncryptedCacheTest, ADamagedBlockIsCaughtAndServedFromTheOrigin) {
  EngineRig rig;
  EngineConfig c;
  c.line_size = kLine;
  c.mode = CacheMode::kWriteThrough;
  c.sequential_cutoff = 0;
  c.key = KeyOf('k');
  ASSERT_TRUE(rig.Create(c).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, kLine, 9).ok());
  ASSERT_TRUE(HasPattern(rig.engine(), 0, kLine, 9));
  ASSERT_TRUE(rig.engine().Sync().ok());  // out of the device's volatile cache
  // Flip a byte of every line's ciphertext on the raw device.
  AlignedBuffer b(4096);
  for (uint64_t at = kDataOffset; at < rig.raw_cache().size_bytes(); at += kLine) {
    ASSERT_TRUE(rig.raw_cache().Read(at, b.data(), 4096).ok());
    b.data()[100] ^= 0x5a;
    ASSERT_TRUE(rig.raw_cache().Write(at, b.data(), 4096).ok());
  }
  EXPECT_TRUE(HasPattern(rig.engine(), 0, kLine, 9));  // repaired from the origin
  EXPECT_GT(rig.engine().stats().errors.checksum_repaired, 0u);
  // Offline check sees it too, with the key; without the key it cannot run.
  ASSERT_TRUE(rig.Restart(c).ok());
  rig.DropEngine();
  EXPECT_EQ(CheckCache(&rig.origin(), &rig.cache(), &rig.store(), nullptr).status().code(), StatusCode::kMismatch);
  Result<CheckReport> report = CheckCache(&rig.origin(), &rig.cache(), &rig.store(), c.key);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->problems.empty()) << report->problems.front();
  EXPECT_GT(report->blocks_verified, 0u);
}

}  // namespace
}  // namespace cachecore
