// The RAM tier: copies of the hottest 4 KiB blocks in memory, above the
// cache device (docs/design.md, "The RAM tier"). A read cache only: it is
// filled from cache reads whose checksums proved them, never holds the
// only copy of anything, and forgets a block before anything changes it.
//
// Consistency rides on the engine's line ownership: a block is filled or
// read while its line's stripe is held (shared at least), and forgotten
// while it is held exclusively by the request that changes the line, so a
// fill can never put back a copy older than a write. The tier's own
// mutexes (one per shard) only keep its maps whole; none is held
// across I/O or while taking another.
//
// Eviction is S3-FIFO per shard (the engine's policy family): one-hit
// blocks leave from the small queue, so a scan of cached data passes
// through without pushing the hot blocks out. Not a public header.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/thread_annotations.h"
#include "cachecore/policy/eviction_policy.h"

namespace cachecore {

class RamTier {
 public:
  // At most this many shards, each of at least kShardBytes: a tier of
  // 4 MiB is one shard, of 256 MiB or more 64 (fewer shards of a small tier
  // keep each with many groups, so that none fills while others are empty).
  static constexpr uint32_t kShards = 64;
  static constexpr uint64_t kShardBytes = 4 << 20;
  static constexpr uint64_t kBlock = 4096;
  // Blocks go to the shards in groups of this many (64 KiB): a read of a
  // group takes one shard's lock, and a line of 1 MiB still spreads over
  // 16 shards rather than filling one while others stand empty.
  static constexpr uint64_t kGroup = 16;
  // The smallest tier: one shard.
  static constexpr uint64_t kMinBytes = kShardBytes;

  explicit RamTier(uint32_t blocks_per_line);
  ~RamTier();
  RamTier(const RamTier&) = delete;
  RamTier& operator=(const RamTier&) = delete;

  // Empties the tier and gives it `bytes` (0: off; the caller gives at
  // least kMinBytes, or less turns it off), rounded down to whole blocks in
  // every shard. The blocks' memory is
  // taken from the system as they fill it; the maps (about 2 %) at once.
  // Safe while requests run: they see an empty tier, or none. False, the
  // tier as it was, when the memory for its maps is refused.
  bool Resize(uint64_t bytes) EXCLUDES(resize_mu_);
  uint64_t capacity_bytes() const { return capacity_bytes_.load(std::memory_order_relaxed); }
  // Whether the tier may hold a block (false: the calls below return at
  // once). True from the start of a Resize to a size until the end of a
  // Resize to 0, so that a change that sees false cannot miss a copy.
  bool on() const { return active_.load(); }

  // Whether blocks [first, end) of `line` are all held: if so they are
  // copied to `out` (4 KiB each, in order) and count as hits to the policy.
  // False, with `out` perhaps partly written, otherwise. REQUIRES: the
  // line's stripe, shared at least.
  bool Read(uint64_t line, uint32_t first, uint32_t end, uint8_t* out);
  // The same for line-space blocks [first, end) (byte offset / 4096), which
  // may span lines: a request's whole range at once, a group's blocks under
  // one lock whatever the line size. Stops at the first group (kGroup
  // blocks) it does not hold whole; returns the blocks copied before it.
  // REQUIRES: every line's stripe.
  uint64_t ReadBlocks(uint64_t first, uint64_t end, uint8_t* out);
  // Keeps a copy of blocks [first, end) of `line` from `data` (4 KiB each)
  // for those not held already, evicting others as the policy says.
  // REQUIRES: the line's stripe, shared at least, held since `data` was
  // read and proven.
  void Fill(uint64_t line, uint32_t first, uint32_t end, const uint8_t* data);
  // Forgets blocks [first, end) of `line`. REQUIRES: the line's stripe
  // held exclusively, until its change is complete.
  void Forget(uint64_t line, uint32_t first, uint32_t end);
  // Forgets every block of lines [first, end).
  void ForgetLines(uint64_t first, uint64_t end);

  uint64_t held_blocks() const;
  // Every byte the tier holds: its blocks' memory (as much as was taken
  // from the system) and its maps and policies.
  size_t MemoryBytes() const;

 private:
  struct Shard;
  // Runs fn(shard, key, run_end) for each run of [key, end) within one
  // group (line-space blocks), its shard's lock held, while fn returns
  // true. The shard is the group's under the shard count in force, which
  // Resize changes only while it holds every shard's lock.
  template <typename Fn>
  void ForEachRun(uint64_t key, uint64_t end, Fn fn) const;
  void LockEveryShard() const;
  void UnlockEveryShard() const;

  const uint32_t blocks_per_line_;
  Mutex resize_mu_;
  std::atomic<bool> active_{false};
  std::atomic<uint64_t> capacity_bytes_{0};
  std::atomic<uint32_t> shard_count_{1};
  std::array<std::unique_ptr<Shard>, kShards> shards_;
};

}  // namespace cachecore
