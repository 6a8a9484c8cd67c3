// EvictionPolicy: which cache line to give up when a new one is needed.
// The engine calls it under its own mutex; implementations are not
// thread-safe themselves. Slots are 0..capacity-1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cachecore/base/status.h"

namespace cachecore {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  // A new line now occupies `slot` (a miss brought it in); `key` is its
  // origin line number.
  virtual void OnInsert(uint32_t slot, uint64_t key) = 0;
  // A line already cached comes under the policy without an access: loaded
  // at start, or unpinned. As an insert unless a policy counts accesses.
  virtual void OnRestore(uint32_t slot, uint64_t key) { OnInsert(slot, key); }
  // A hit on a slot that is not tracked (the engine keeps pinned lines out
  // of the policy) changes nothing that matters.
  virtual void OnHit(uint32_t slot) = 0;
  // The line in `slot` is gone (invalidated or evicted).
  virtual void OnRemove(uint32_t slot) = 0;
  // Chooses a victim among occupied slots, to make room for the line
  // `incoming` (its key: ARC's ghosts steer by it). `usable` says whether a candidate
  // may go now (it is not busy); candidates it refuses keep their place. A
  // candidate it accepts is claimed: the policy returns that one.
  // Returns nothing when the policy would not let `incoming` in at this
  // price (W-TinyLFU's admission, when every line of its window is busy),
  // when no occupied slot is usable, once `usable` has
  // refused `max_refusals` candidates (a caller that must not walk a cache
  // full of lines it cannot take), or after `max_looks` candidates, refused
  // or given another round for their hits (a caller that must not take
  // long: a reactor; the next call goes on where this one stopped). With
  // no bound on looks the victim is the policy's own choice.
  // The caller removes the victim (OnRemove) before it picks again.
  virtual std::optional<uint32_t> PickVictim(uint64_t incoming, const std::function<bool(uint32_t)>& usable,
                                             uint64_t max_refusals, uint64_t max_looks) = 0;
  // Heap bytes the policy holds.
  virtual size_t MemoryBytes() const = 0;
  // What it is doing now, for `cachectl stats` (the adaptive policy's
  // current choice); empty when there is nothing to say beyond its name.
  virtual std::string Describe() const { return {}; }
};

// The origin line (key) of an occupied slot; called by PickVictim.
using KeyOfSlot = std::function<uint64_t(uint32_t slot)>;

// S3-FIFO (Yang et al., SOSP 2023): a small probationary FIFO (10 %), a main
// FIFO with a 2-bit frequency, and a ghost of recently evicted keys.
// Scan-resistant (one-hit lines leave from the small queue) and
// frequency-aware. A line moves to main after more than `promote_after`
// hits in the small queue (0: after any hit). About 7 bytes per slot: the
// FIFOs are rings of slot numbers, and the ghost (0.9 x `capacity` keys)
// 16-bit fingerprints in small buckets (docs/design.md, "RAM per line").
std::unique_ptr<EvictionPolicy> NewS3FifoPolicy(uint32_t capacity, uint32_t promote_after,
                                                KeyOfSlot key_of);

// Plain LRU, the baseline every other policy must beat.
std::unique_ptr<EvictionPolicy> NewLruPolicy(uint32_t capacity);

// ARC (Megiddo and Modha, FAST 2003), with exact ghost lists (about 60
// bytes a line): a candidate to compare with (`cachectl replay --policy`).
std::unique_ptr<EvictionPolicy> NewArcPolicy(uint32_t capacity, KeyOfSlot key_of);

// W-TinyLFU (Caffeine's design) in its static layout: a 1 % LRU window, a
// segmented LRU main area (80 % protected) and TinyLFU admission by a
// 4-bit count-min sketch. About 11 bytes a line. A candidate to compare with.
std::unique_ptr<EvictionPolicy> NewWTinyLfuPolicy(uint32_t capacity, KeyOfSlot key_of);

// The default: a live S3-FIFO whose shape (the small queue's share, the
// hits that promote to main, how far back the ghost reaches) follows the
// best of eight shapes run as miniature caches over a spatial sample of
// the keys. About 6.5 bytes a line and 0.5 MB of shadows.
std::unique_ptr<EvictionPolicy> NewAdaptivePolicy(uint32_t capacity, KeyOfSlot key_of);

// Which eviction policy an engine (and a replay) runs.
enum class PolicyKind { kAdaptive, kS3Fifo, kLru, kArc, kWTinyLfu };

// "adaptive", "s3fifo", "lru", "arc" or "wtinylfu"; InvalidArgument naming
// the choices for anything else.
Result<PolicyKind> ParsePolicyName(const std::string& name);
const char* PolicyName(PolicyKind kind);

// The policy of `kind` over `capacity` slots; `promote_after` is
// S3-FIFO's (ignored by the others), `key_of` as above.
std::unique_ptr<EvictionPolicy> NewEvictionPolicy(PolicyKind kind, uint32_t capacity,
                                                  uint32_t promote_after, KeyOfSlot key_of);

}  // namespace cachecore
