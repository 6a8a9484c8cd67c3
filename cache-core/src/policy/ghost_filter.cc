#include "policy/ghost_filter.h"

#include <algorithm>

#include "base/mix64.h"

namespace cachecore {

namespace {
// Offset from the index's hash of the same line (a ghost key is a line).
uint64_t Mix(uint64_t key) { return Mix64(key + 0x9e3779b97f4a7c15ull); }
}  // namespace

GhostFilter::GhostFilter(uint64_t remembered, uint32_t fingerprint_bits)
    : bits_(fingerprint_bits),
      words_per_bucket_(kBucket * fingerprint_bits / 64),
      buckets_(std::max<uint64_t>((remembered + kBucket - 1) / kBucket, 1)),
      words_(buckets_ * words_per_bucket_, 0) {}

// The bucket from the hash's high bits, the fingerprint from its low ones.
uint64_t GhostFilter::BucketOf(uint64_t hash) const {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(hash) * buckets_) >> 64);
}

uint16_t GhostFilter::Fingerprint(uint64_t hash) const {
  const auto f = static_cast<uint16_t>(hash & ((uint64_t{1} << bits_) - 1));
  return f == 0 ? 1 : f;
}

// Entry i holds bits [i x bits, (i + 1) x bits) of the bucket's words; 16
// entries of 12 or 16 bits fill 3 or 4 words exactly.
void GhostFilter::Unpack(uint64_t bucket, Entries& out) const {
  const uint64_t* w = &words_[bucket * words_per_bucket_];
  const uint64_t mask = (uint64_t{1} << bits_) - 1;
  for (uint32_t i = 0; i < kBucket; ++i) {
    const uint32_t bit = i * bits_, word = bit / 64, shift = bit % 64;
    uint64_t v = w[word] >> shift;
    if (shift + bits_ > 64) v |= w[word + 1] << (64 - shift);
    out[i] = static_cast<uint16_t>(v & mask);
  }
}

void GhostFilter::Pack(uint64_t bucket, const Entries& in) {
  uint64_t* w = &words_[bucket * words_per_bucket_];
  std::fill(w, w + words_per_bucket_, 0);
  for (uint32_t i = 0; i < kBucket; ++i) {
    const uint32_t bit = i * bits_, word = bit / 64, shift = bit % 64;
    w[word] |= uint64_t{in[i]} << shift;
    if (shift + bits_ > 64) w[word + 1] |= uint64_t{in[i]} >> (64 - shift);
  }
}

void GhostFilter::Add(uint64_t key) {
  const uint64_t hash = Mix(key);
  const uint64_t bucket = BucketOf(hash);
  Entries e;
  Unpack(bucket, e);
  const uint16_t f = Fingerprint(hash);
  // Already there: it moves to the front; else the oldest falls off the end.
  uint16_t* end = std::find(e, e + kBucket - 1, f);
  std::copy_backward(e, end, end + 1);
  e[0] = f;
  Pack(bucket, e);
}

bool GhostFilter::Take(uint64_t key, uint32_t newest) {
  const uint64_t hash = Mix(key);
  const uint64_t bucket = BucketOf(hash);
  Entries e;
  Unpack(bucket, e);
  const uint32_t n = std::min(newest, kBucket);
  uint16_t* at = std::find(e, e + n, Fingerprint(hash));
  if (at == e + n) return false;
  std::copy(at + 1, e + kBucket, at);
  e[kBucket - 1] = 0;
  Pack(bucket, e);
  return true;
}

}  // namespace cachecore
