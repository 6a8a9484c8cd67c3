// The splitmix64 finalizer: a fast 64-bit mix whose every output bit
// depends on every input bit (hash tables and filters keyed by line).
// Not a public header.
#pragma once

#include <cstdint>

namespace cachecore {

inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace cachecore
