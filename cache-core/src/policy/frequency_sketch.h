// How often each key was seen lately, approximately: a count-min sketch of
// four rows of 4-bit counters (TinyLFU, Einziger, Friedman and Manes), a
// row about as wide as the cache has lines (2 bytes a line in all). A key's
// estimate is the least of its four counters, never below its true count
// since the last aging, capped at 15. Aging halves every counter once
// 10 x width increments have been counted, so that old popularity fades.
// Not thread-safe. Not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cachecore {

class FrequencySketch {
 public:
  // `width`: about the number of keys that matter (the cache's lines).
  explicit FrequencySketch(uint32_t width);

  void Increment(uint64_t key);
  uint32_t Estimate(uint64_t key) const;
  size_t MemoryBytes() const { return words_.capacity() * sizeof(uint64_t); }

 private:
  static constexpr int kRows = 4;
  // The word and the shift of `key`'s counter in row `row`.
  void Locate(uint64_t hash, int row, size_t& word, int& shift) const;
  void Age();

  uint64_t row_counters_;  // a power of two
  std::vector<uint64_t> words_;  // 16 counters a word, the rows one after another
  uint64_t increments_ = 0, age_after_;
};

}  // namespace cachecore
