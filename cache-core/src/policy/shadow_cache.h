// A miniature cache for the adaptive policy: an S3-FIFO of one shape over
// a few thousand slots, fed the accesses of a spatial sample of the keys
// (SHARDS, Waldspurger et al., FAST 2015: a cache of R x the lines sees
// the keys whose hash falls under R, and its hit ratio estimates the full
// cache's). It counts its hits; the adaptive policy compares them. It
// holds each key as 32 bits of its hash (two of a few thousand sampled
// keys alike: about one chance in a thousand, and then a miniature shares
// a line, which costs nothing real) and slots in 16 bits: about 60 KB a
// shadow of 4,096 lines. Not thread-safe. Not a public header.
#pragma once

#include <cstdint>
#include <vector>

#include "policy/s3fifo.h"

namespace cachecore {

class ShadowCache {
 public:
  static constexpr uint32_t kMaxLines = 65535;

  // REQUIRES: 2 <= lines <= kMaxLines.
  ShadowCache(uint32_t lines, const S3FifoShape& shape, const GhostLayout& ghost);
  ShadowCache(const ShadowCache&) = delete;  // its policy holds `this`
  ShadowCache& operator=(const ShadowCache&) = delete;

  // One access of `key`: a hit, or a miss that takes a free slot or the
  // policy's victim's.
  void Access(uint64_t key);
  // The hits since the last call.
  uint64_t TakeHits();
  size_t MemoryBytes() const;

 private:
  static constexpr uint16_t kEmpty = UINT16_MAX;
  // The index from key to slot: linear probing over slot numbers (the key
  // is the slot's), deletion by shifting back, so there are no tombstones.
  size_t Home(uint32_t key) const;
  uint16_t Find(uint32_t key) const;
  void Insert(uint32_t key, uint16_t slot);
  void Erase(uint32_t key);

  uint32_t lines_, used_ = 0;
  std::vector<uint32_t> key_of_slot_;  // 32 bits of each key's hash
  std::vector<uint16_t> table_;        // a power of two, at least twice the lines
  S3Fifo policy_;
  uint64_t hits_ = 0;
};

}  // namespace cachecore
