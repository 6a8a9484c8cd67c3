#include "policy/frequency_sketch.h"

#include <algorithm>
#include <bit>

namespace cachecore {

namespace {
uint64_t Mix(uint64_t x) {  // splitmix64's finalizer: every key bit moves every hash bit
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

FrequencySketch::FrequencySketch(uint32_t width)
    : row_counters_(std::bit_ceil(std::max<uint64_t>(width, 16))),
      words_(kRows * row_counters_ / 16, 0),
      age_after_(10 * std::max<uint64_t>(width, 16)) {}

// Rows take their counters from two halves of one hash (h1 + row x h2:
// Kirsch and Mitzenmacher), so four rows cost one hash.
void FrequencySketch::Locate(uint64_t hash, int row, size_t& word, int& shift) const {
  const uint64_t h1 = hash & 0xffffffff, h2 = (hash >> 32) | 1;
  const uint64_t counter = (h1 + static_cast<uint64_t>(row) * h2) & (row_counters_ - 1);
  word = static_cast<size_t>(row * (row_counters_ / 16) + counter / 16);
  shift = static_cast<int>(counter % 16) * 4;
}

void FrequencySketch::Increment(uint64_t key) {
  const uint64_t hash = Mix(key);
  for (int row = 0; row < kRows; ++row) {
    size_t word;
    int shift;
    Locate(hash, row, word, shift);
    if (((words_[word] >> shift) & 15) < 15) words_[word] += uint64_t{1} << shift;
  }
  if (++increments_ >= age_after_) Age();
}

uint32_t FrequencySketch::Estimate(uint64_t key) const {
  const uint64_t hash = Mix(key);
  uint32_t least = 15;
  for (int row = 0; row < kRows; ++row) {
    size_t word;
    int shift;
    Locate(hash, row, word, shift);
    least = std::min(least, static_cast<uint32_t>((words_[word] >> shift) & 15));
  }
  return least;
}

// Every counter halved at once: a shift of the word, each counter's low
// bit dropped rather than carried into its neighbour.
void FrequencySketch::Age() {
  for (uint64_t& w : words_) w = (w >> 1) & 0x7777777777777777ull;
  increments_ /= 2;
}

}  // namespace cachecore
