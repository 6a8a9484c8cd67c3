// Small helpers for engine tests: write and check recognisable 4 KiB blocks.
#pragma once

#include <gtest/gtest.h>

#include <cstring>

#include "cachecore/engine/engine.h"

namespace cachecore::testing {

// Fills `len` bytes with a pattern unique to (tag, offset).
inline void FillPattern(uint8_t* p, uint64_t offset, uint64_t len, uint32_t tag) {
  for (uint64_t i = 0; i < len; i += 8) {
    uint64_t v = (offset + i) * 0x9E3779B97F4A7C15ull ^ tag;
    std::memcpy(p + i, &v, std::min<uint64_t>(8, len - i));
  }
}

inline Status WritePattern(Engine& e, uint64_t offset, uint64_t len, uint32_t tag, bool fua = false) {
  AlignedBuffer b(len);
  FillPattern(b.data(), offset, len, tag);
  return e.Write(offset, b.data(), len, fua);
}

// True when [offset, offset+len) reads back as the pattern of `tag`.
inline ::testing::AssertionResult HasPattern(Engine& e, uint64_t offset, uint64_t len,
                                             uint32_t tag) {
  AlignedBuffer got(len), want(len);
  Status s = e.Read(offset, got.data(), len);
  if (!s.ok()) return ::testing::AssertionFailure() << "read failed: " << s.ToString();
  FillPattern(want.data(), offset, len, tag);
  for (uint64_t i = 0; i < len; ++i) {
    if (got.data()[i] != want.data()[i]) {
      return ::testing::AssertionFailure() << "byte " << offset + i << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace cachecore::testing
