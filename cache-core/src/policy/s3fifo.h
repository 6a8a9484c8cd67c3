// S3-FIFO (Yang et al., SOSP 2023) with a shape that may change while it
// runs: the small queue's share, the hits that promote a small line to
// main, and how far back the ghost reaches (a line evicted from small
// enters main when it comes back within that many evictions). These three
// decide what S3-FIFO admits to main, so they are its admission policy.
// The adaptive policy switches the shape of the live one; its shadow
// caches run one shape each. Not thread-safe. Not a public header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cachecore/policy/eviction_policy.h"
#include "policy/ghost_filter.h"
#include "policy/slot_fifo.h"

namespace cachecore {

struct S3FifoShape {
  uint32_t small_percent = 10;    // the small queue's share of the lines (1..50)
  uint32_t promote_after = 1;     // more hits than this in small: to main (0: T1, 1: T2)
  uint32_t ghost_percent = 100;   // the ghost remembers this share of main's lines (100 or more)
  // "small 10 %, T2, ghost 1x" (or 1.5x).
  std::string Describe() const;
};

// The ghost's size, fixed when the policy is made: `max_percent` of
// main's lines (at the default share) in fingerprints of `fingerprint_bits`.
struct GhostLayout {
  uint32_t max_percent = 100;
  uint32_t fingerprint_bits = 16;
};

class S3Fifo : public EvictionPolicy {
 public:
  // REQUIRES: shape.ghost_percent <= layout.max_percent.
  S3Fifo(uint32_t capacity, const S3FifoShape& shape, KeyOfSlot key_of, const GhostLayout& layout);

  // Takes effect at the next call: lines stay where they are.
  void SetShape(const S3FifoShape& shape);
  const S3FifoShape& shape() const { return shape_; }

  void OnInsert(uint32_t slot, uint64_t key) override;
  void OnHit(uint32_t slot) override;
  void OnRemove(uint32_t slot) override;
  std::optional<uint32_t> PickVictim(uint64_t incoming, const std::function<bool(uint32_t)>& usable,
                                     uint64_t max_refusals, uint64_t max_looks) override;
  size_t MemoryBytes() const override;

 private:
  // Per slot, one byte: where (2 bits), frequency (2), entries in the
  // small ring (2) and in the main ring (2).
  enum Where : uint8_t { kNone = 0, kSmall = 1, kMain = 2, kPicked = 3 };
  struct Ring {
    explicit Ring(uint32_t capacity) : entries(capacity) {}
    SlotFifo entries;  // pushed at the back, taken from the front
    uint64_t live = 0;
  };

  Where WhereOf(uint32_t s) const { return static_cast<Where>(meta_[s] & 3); }
  void SetWhere(uint32_t s, Where w) { meta_[s] = static_cast<uint8_t>((meta_[s] & ~3) | w); }
  uint32_t Freq(uint32_t s) const { return (meta_[s] >> 2) & 3; }
  void SetFreq(uint32_t s, uint32_t f) { meta_[s] = static_cast<uint8_t>((meta_[s] & ~0xc) | f << 2); }
  // Entries of slot `s` in ring `w` (kSmall or kMain).
  uint32_t Entries(uint32_t s, Where w) const { return (meta_[s] >> (2 + 2 * w)) & 3; }
  void SetEntries(uint32_t s, Where w, uint32_t n);

  void Place(uint32_t slot, Where w);
  uint32_t TakeFront(Where w);
  void Compact(Where w);
  std::optional<uint32_t> FromSmall(const std::function<bool(uint32_t)>& usable, bool& refused);
  std::optional<uint32_t> FromMain(const std::function<bool(uint32_t)>& usable, bool& refused);

  std::vector<uint8_t> meta_;
  KeyOfSlot key_of_;
  Ring rings_[3];  // by Where: kSmall and kMain
  S3FifoShape shape_;
  uint32_t small_target_;
  GhostLayout layout_;
  GhostFilter ghost_;
  uint32_t ghost_view_;  // the newest of each ghost bucket the shape looks at
  bool ghost_used_ = false;
  uint32_t capacity_;
};

}  // namespace cachecore
