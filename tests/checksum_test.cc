// Crc32c against a bit-at-a-time reference: the checksums are on disk, so
// every path (table, one crc32 chain, three chains combined) must give the
// same value for every length, start alignment and seed.
#include "cachecore/metadata/checksum.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace cachecore {
namespace {

constexpr size_t kMaxLen = 65536;
constexpr uint32_t kSeeds[] = {0, 1, 0xE3069283u, 0xFFFFFFFFu, 0x5A5A1234u};

// The CRC register after one more byte, one bit at a time (the definition).
uint32_t ReferenceStep(uint32_t reg, uint8_t byte) {
  reg ^= byte;
  for (int k = 0; k < 8; ++k) reg = (reg & 1) ? (reg >> 1) ^ 0x82F63B78u : reg >> 1;
  return reg;
}

// ref[n] = the reference Crc32c(p, n, seed) for every n <= len, in one pass.
std::vector<uint32_t> ReferencePrefixes(const uint8_t* p, size_t len, uint32_t seed) {
  std::vector<uint32_t> ref(len + 1);
  uint32_t reg = ~seed;
  ref[0] = ~reg;
  for (size_t n = 0; n < len; ++n) ref[n + 1] = ~(reg = ReferenceStep(reg, p[n]));
  return ref;
}

std::vector<uint8_t> RandomBytes(size_t len) {
  std::mt19937 rng(20240611);
  std::vector<uint8_t> bytes(len);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

// Every length up to 1100 (both sides of the three-chain threshold), odd
// lengths up to 20000 (several rounds and short tails), and the block sizes.
std::vector<size_t> LengthsToCheck() {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 1100; ++n) lengths.push_back(n);
  for (size_t n = 1101; n <= 20000; n += 37) lengths.push_back(n);
  for (size_t n : {4095, 4096, 4097, 6143, 6144, 6145, 12288, 12289, 65535, 65536})
    lengths.push_back(n);
  return lengths;
}

TEST(Crc32cTest, KnownVector) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
}

TEST(Crc32cTest, MatchesReferenceForEveryLengthAlignmentAndSeed) {
  const std::vector<uint8_t> buf = RandomBytes(kMaxLen + 16);
  const std::vector<size_t> lengths = LengthsToCheck();
  for (size_t offset : {0, 1, 3, 4, 7, 8, 13}) {
    for (uint32_t seed : kSeeds) {
      const uint8_t* p = buf.data() + offset;
      const std::vector<uint32_t> ref = ReferencePrefixes(p, kMaxLen, seed);
      for (size_t n : lengths) {
        ASSERT_EQ(Crc32c(p, n, seed), ref[n])
            << "len " << n << " offset " << offset << " seed " << seed;
      }
    }
  }
}

// The seed is a previous result: Crc32c(b, Crc32c(a, s)) == Crc32c(a + b, s).
TEST(Crc32cTest, ContinuesFromAPreviousResult) {
  const std::vector<uint8_t> buf = RandomBytes(kMaxLen + 1);
  for (size_t len : {4096, 5000, 65536, 65537}) {
    for (uint32_t seed : kSeeds) {
      const uint32_t whole = Crc32c(buf.data(), len, seed);
      for (size_t split : {size_t{0}, size_t{1}, size_t{255}, size_t{256}, size_t{2049}, len / 3,
                           len / 2, len - 1, len}) {
        const uint32_t first = Crc32c(buf.data(), split, seed);
        EXPECT_EQ(Crc32c(buf.data() + split, len - split, first), whole)
            << "len " << len << " split " << split << " seed " << seed;
      }
    }
  }
}

}  // namespace
}  // namespace cachecore
