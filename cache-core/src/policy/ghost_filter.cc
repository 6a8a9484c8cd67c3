#include "policy/ghost_filter.h"

#include <algorithm>

#include "base/mix64.h"

namespace cachecore {

namespace {
// Offset from the index's hash of the same line (a ghost key is a line).
uint64_t Mix(uint64_t key) { return Mix64(key + 0x9e3779b97f4a7c15ull); }
}  // namespace

GhostFilter::GhostFilter(uint64_t remembered)
    : buckets_(std::max<uint64_t>((remembered + kBucket - 1) / kBucket, 1)),
      fingerprints_(buckets_ * kBucket, 0) {}

// The bucket from the hash's high bits, the fingerprint from its low ones.
uint16_t* GhostFilter::Bucket(uint64_t hash) {
  return &fingerprints_[static_cast<size_t>((static_cast<unsigned __int128>(hash) * buckets_) >> 64) * kBucket];
}

uint16_t GhostFilter::Fingerprint(uint64_t hash) {
  const auto f = static_cast<uint16_t>(hash);
  return f == 0 ? 1 : f;
}

void GhostFilter::Add(uint64_t key) {
  const uint64_t hash = Mix(key);
  uint16_t* bucket = Bucket(hash);
  const uint16_t f = Fingerprint(hash);
  // Already there: it moves to the front; else the oldest falls off the end.
  uint16_t* end = std::find(bucket, bucket + kBucket - 1, f);
  std::copy_backward(bucket, end, end + 1);
  bucket[0] = f;
}

bool GhostFilter::Take(uint64_t key) {
  const uint64_t hash = Mix(key);
  uint16_t* bucket = Bucket(hash);
  uint16_t* at = std::find(bucket, bucket + kBucket, Fingerprint(hash));
  if (at == bucket + kBucket) return false;
  std::copy(at + 1, bucket + kBucket, at);
  bucket[kBucket - 1] = 0;
  return true;
}

}  // namespace cachecore
