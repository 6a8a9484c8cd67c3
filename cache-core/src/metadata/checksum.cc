#include "cachecore/metadata/checksum.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace cachecore {

namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

// One step of the reflected CRC: the register times x, mod the polynomial.
constexpr uint32_t MulX(uint32_t c) { return (c & 1) ? (c >> 1) ^ kPoly : c >> 1; }

std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = MulX(c);
    table[i] = c;
  }
  return table;
}

uint32_t SoftwareCrc(const uint8_t* p, size_t len, uint32_t crc) {
  static const std::array<uint32_t, 256> table = MakeTable();
  for (size_t i = 0; i < len; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

uint64_t Load64(const uint8_t* p) {
  uint64_t word;
  std::memcpy(&word, p, 8);  // any alignment
  return word;
}

__attribute__((target("sse4.2"))) uint32_t HardwareCrc(const uint8_t* p, size_t len, uint32_t crc) {
  uint64_t c = crc;
  for (; len >= 8; p += 8, len -= 8) c = _mm_crc32_u64(c, Load64(p));
  uint32_t c32 = static_cast<uint32_t>(c);
  while (len--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

// crc32 has a latency of 3 cycles and a throughput of 1 per cycle, so one
// chain uses a third of the instruction. Large inputs run three chains over
// three adjacent parts of `words` 8-byte words each, then move the first two
// results past the parts that follow them and XOR (the CRC is linear).
// Parts of up to kMaxWords words (6 KiB a round) keep the table small and
// cost one combine per round, a few percent at most.
constexpr size_t kMaxWords = 256;
// Below this the combine costs more than the chains save.
constexpr size_t kMinThreeWay = 256;

// kShift[w] = x^(64w - 33) mod P (reflected): the constant that moves a CRC
// register past w words with one carry-less multiply. The 33 undoes the
// x^32 that crc32 multiplies in and the one bit a reflected product loses.
constexpr std::array<uint32_t, 2 * kMaxWords + 1> MakeShiftTable() {
  std::array<uint32_t, 2 * kMaxWords + 1> table{};
  uint32_t c = 1;  // x^31: bit 0 is the highest power in reflected form
  for (size_t w = 1; w < table.size(); ++w) {
    table[w] = c;
    for (int k = 0; k < 64; ++k) c = MulX(c);
  }
  return table;
}
constexpr std::array<uint32_t, 2 * kMaxWords + 1> kShift = MakeShiftTable();

// The register `crc` followed by w zero words, given k = kShift[w]: the
// product (degree < 63) times x^32 mod P is what crc32 of it computes.
__attribute__((target("sse4.2,pclmul"))) uint32_t Shift(uint32_t crc, uint32_t k) {
  __m128i product = _mm_clmulepi64_si128(_mm_cvtsi32_si128(static_cast<int>(crc)),
                                         _mm_cvtsi32_si128(static_cast<int>(k)), 0);
  return static_cast<uint32_t>(_mm_crc32_u64(0, _mm_cvtsi128_si64(product)));
}

// The CRC of the 24 * words bytes at p, from register crc.
__attribute__((target("sse4.2,pclmul"))) uint32_t ThreeWayRound(const uint8_t* p, size_t words,
                                                                uint32_t crc) {
  const uint8_t* p1 = p + 8 * words;
  const uint8_t* p2 = p1 + 8 * words;
  uint64_t c0 = crc, c1 = 0, c2 = 0;  // the later parts start from zero
  for (size_t i = 0; i < 8 * words; i += 8) {
    c0 = _mm_crc32_u64(c0, Load64(p + i));
    c1 = _mm_crc32_u64(c1, Load64(p1 + i));
    c2 = _mm_crc32_u64(c2, Load64(p2 + i));
  }
  return Shift(static_cast<uint32_t>(c0), kShift[2 * words]) ^
         Shift(static_cast<uint32_t>(c1), kShift[words]) ^ static_cast<uint32_t>(c2);
}

uint32_t ThreeWayCrc(const uint8_t* p, size_t len, uint32_t crc) {
  while (len >= kMinThreeWay) {
    size_t words = std::min(len / 24, kMaxWords);
    crc = ThreeWayRound(p, words, crc);
    p += 24 * words;
    len -= 24 * words;
  }
  return HardwareCrc(p, len, crc);  // fewer than kMinThreeWay bytes left
}

enum class Engine { kSoftware, kSse42, kSse42Clmul };

Engine ChooseEngine() {
  if (!__builtin_cpu_supports("sse4.2")) return Engine::kSoftware;
  return __builtin_cpu_supports("pclmul") ? Engine::kSse42Clmul : Engine::kSse42;
}

}  // namespace

uint32_t Crc32c(const void* data, size_t len, uint32_t seed) {
  static const Engine engine = ChooseEngine();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = ~seed;
  if (engine == Engine::kSoftware) {
    crc = SoftwareCrc(p, len, crc);
  } else if (engine == Engine::kSse42Clmul && len >= kMinThreeWay) {
    crc = ThreeWayCrc(p, len, crc);
  } else {
    crc = HardwareCrc(p, len, crc);
  }
  return ~crc;
}

}  // namespace cachecore
