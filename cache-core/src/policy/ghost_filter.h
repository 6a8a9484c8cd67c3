// S3-FIFO's ghost (the keys of lines evicted from the small queue
// recently) as fingerprints in buckets of 16: a key's bucket comes from
// its hash, and each bucket keeps its 16 latest keys in the order they
// came, so the whole remembers about the last `remembered` keys, as an
// exact FIFO of keys (a map and a deque: 50 to 70 bytes a key) would, in
// 2 bytes a key with 16-bit fingerprints or 1.5 with 12-bit ones. A key
// not remembered is found with a probability of about 16 in 2^bits (two
// keys with the same fingerprint in a bucket). A lookup may look at only
// the newest part of each bucket: the keys of a shorter ghost.
// Not thread-safe. Not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cachecore {

class GhostFilter {
 public:
  static constexpr uint32_t kBucket = 16;

  // `fingerprint_bits`: 12 or 16.
  GhostFilter(uint64_t remembered, uint32_t fingerprint_bits);

  void Add(uint64_t key);
  // Whether `key` is among the newest `newest` (1..kBucket) of its bucket
  // (about newest / kBucket of the keys remembered); if so it is forgotten
  // (a line that came back from the ghost is not promoted by it twice).
  bool Take(uint64_t key, uint32_t newest = kBucket);
  size_t MemoryBytes() const { return words_.capacity() * sizeof(uint64_t); }

 private:
  using Entries = uint16_t[kBucket];  // a bucket unpacked, the newest first; 0: empty
  uint64_t BucketOf(uint64_t hash) const;
  uint16_t Fingerprint(uint64_t hash) const;
  void Unpack(uint64_t bucket, Entries& out) const;
  void Pack(uint64_t bucket, const Entries& in);

  uint32_t bits_, words_per_bucket_;
  uint64_t buckets_;
  std::vector<uint64_t> words_;  // each bucket's fingerprints, bits_ apiece
};

}  // namespace cachecore
