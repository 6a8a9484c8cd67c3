// S3-FIFO's ghost (the keys of lines evicted from the small queue
// recently) as 16-bit fingerprints in buckets of 16: a key's bucket comes
// from its hash, and each bucket keeps its 16 latest keys in the order they
// came, so the whole remembers about the last `remembered` keys, as the
// exact FIFO of keys it replaces did (a map and a deque: 50 to 70 bytes a
// key), in 2 bytes a key. A key not remembered is found with a probability
// of about 16 in 65,536 (two keys with the same fingerprint in a bucket).
// Not thread-safe. Not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cachecore {

class GhostFilter {
 public:
  explicit GhostFilter(uint64_t remembered);

  void Add(uint64_t key);
  // Whether `key` is remembered; if so it is forgotten (a line that came
  // back from the ghost is not promoted by it twice).
  bool Take(uint64_t key);
  size_t MemoryBytes() const { return fingerprints_.capacity() * sizeof(uint16_t); }

 private:
  static constexpr uint32_t kBucket = 16;
  // The bucket's first entry and the key's fingerprint (never 0: empty).
  uint16_t* Bucket(uint64_t hash);
  static uint16_t Fingerprint(uint64_t hash);

  uint64_t buckets_;
  std::vector<uint16_t> fingerprints_;  // per bucket, the newest first
};

}  // namespace cachecore
