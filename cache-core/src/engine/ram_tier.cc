#include "engine/ram_tier.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>

#include "base/mix64.h"

namespace cachecore {

namespace {
constexpr uint64_t kNoKey = UINT64_MAX;
constexpr uint32_t kEmpty = 0;  // a table entry holds its frame + 1
}  // namespace

// One shard: frames of 4 KiB, the key (line-space block) of each, an
// open-addressed table from key to frame (linear probing, deletion by
// backward shift: no allocation per block), and the frames' policy.
struct RamTier::Shard {
  mutable Mutex mu;
  std::unique_ptr<uint8_t[]> frames GUARDED_BY(mu);  // untouched until handed out
  std::vector<uint64_t> key_of GUARDED_BY(mu);
  std::vector<uint32_t> table GUARDED_BY(mu);
  std::vector<uint32_t> free GUARDED_BY(mu);  // frames given back
  uint32_t capacity GUARDED_BY(mu) = 0;
  uint32_t fresh GUARDED_BY(mu) = 0;  // frames below this were handed out once
  uint64_t held GUARDED_BY(mu) = 0;
  std::unique_ptr<EvictionPolicy> policy GUARDED_BY(mu);

  void Reset(uint32_t frames_wanted) REQUIRES(mu) {
    policy.reset();
    frames.reset();
    capacity = frames_wanted;
    fresh = 0;
    held = 0;
    std::vector<uint64_t>(capacity, kNoKey).swap(key_of);
    std::vector<uint32_t>().swap(free);
    free.reserve(capacity);  // no allocation when blocks are forgotten
    std::vector<uint32_t>(capacity == 0 ? 0 : std::bit_ceil(uint64_t{capacity} * 2), kEmpty).swap(table);
    if (capacity == 0) return;
    frames.reset(new uint8_t[uint64_t{capacity} * kBlock]);  // not zeroed: the pages stay untouched
    // The key_of lambda runs under `mu` (PickVictim is called with it held).
    policy = NewS3FifoPolicy(capacity, /*promote_after=*/1,
                             [this](uint32_t frame) NO_THREAD_SAFETY_ANALYSIS { return key_of[frame]; });
  }

  size_t Mask() const REQUIRES(mu) { return table.size() - 1; }
  size_t Home(uint64_t key) const REQUIRES(mu) { return Mix64(key) & Mask(); }

  // The table position of `key`, or SIZE_MAX.
  size_t Find(uint64_t key) const REQUIRES(mu) {
    if (capacity == 0) return SIZE_MAX;
    for (size_t i = Home(key);; i = (i + 1) & Mask()) {
      if (table[i] == kEmpty) return SIZE_MAX;
      if (key_of[table[i] - 1] == key) return i;
    }
  }

  uint8_t* Frame(uint32_t frame) REQUIRES(mu) { return frames.get() + uint64_t{frame} * kBlock; }

  void Erase(size_t at) REQUIRES(mu) {
    const uint32_t frame = table[at] - 1;
    policy->OnRemove(frame);
    key_of[frame] = kNoKey;
    free.push_back(frame);
    --held;
    // Backward shift: entries after the hole that could sit in it move up.
    size_t hole = at;
    for (size_t j = (hole + 1) & Mask(); table[j] != kEmpty; j = (j + 1) & Mask()) {
      const size_t home = Home(key_of[table[j] - 1]);
      const bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
      if (!movable) continue;
      table[hole] = table[j];
      hole = j;
    }
    table[hole] = kEmpty;
  }

  // A frame for a new block: never handed out, given back, or the
  // policy's victim.
  std::optional<uint32_t> TakeFrame(uint64_t key) REQUIRES(mu) {
    if (fresh < capacity) return fresh++;
    if (free.empty()) {
      const std::optional<uint32_t> victim =
          policy->PickVictim(key, [](uint32_t) { return true; }, UINT64_MAX, UINT64_MAX);
      if (!victim) return std::nullopt;  // not when full; kept for the policy's contract
      Erase(Find(key_of[*victim]));
    }
    const uint32_t frame = free.back();
    free.pop_back();
    return frame;
  }

  void Insert(uint64_t key, const uint8_t* data) REQUIRES(mu) {
    const std::optional<uint32_t> taken = TakeFrame(key);
    if (!taken) return;
    const uint32_t frame = *taken;
    std::memcpy(Frame(frame), data, kBlock);
    key_of[frame] = key;
    size_t i = Home(key);
    while (table[i] != kEmpty) i = (i + 1) & Mask();
    table[i] = frame + 1;
    ++held;
    policy->OnInsert(frame, key);
  }
};

RamTier::RamTier(uint32_t blocks_per_line) : blocks_per_line_(blocks_per_line) {
  for (auto& shard : shards_) shard = std::make_unique<Shard>();
}

RamTier::~RamTier() = default;

// By block, not by line: a line of 1 MiB would otherwise fill 256 frames
// of one shard while others stand empty.
RamTier::Shard& RamTier::ShardOf(uint64_t key) const { return *shards_[Mix64(key) % kShards]; }

void RamTier::Resize(uint64_t bytes) {
  const uint64_t per_shard = bytes / kShards / kBlock;
  const uint32_t frames = static_cast<uint32_t>(std::min<uint64_t>(per_shard, UINT32_MAX / 2));
  MutexLock resizing(resize_mu_);
  if (frames > 0) active_.store(true);  // before any shard can take a block
  capacity_bytes_.store(0, std::memory_order_relaxed);
  for (auto& shard : shards_) {
    MutexLock lock(shard->mu);
    shard->Reset(frames);
  }
  capacity_bytes_.store(uint64_t{frames} * kShards * kBlock, std::memory_order_relaxed);
  if (frames == 0) active_.store(false);  // every shard empty, and none can take a block
}

bool RamTier::Read(uint64_t line, uint32_t first, uint32_t end, uint8_t* out) {
  if (!on()) return false;
  for (uint64_t key = line * blocks_per_line_ + first, last = line * blocks_per_line_ + end; key < last;
       ++key, out += kBlock) {
    Shard& shard = ShardOf(key);
    MutexLock lock(shard.mu);
    const size_t at = shard.Find(key);
    if (at == SIZE_MAX) return false;
    const uint32_t frame = shard.table[at] - 1;
    std::memcpy(out, shard.Frame(frame), kBlock);
    shard.policy->OnHit(frame);
  }
  return true;
}

void RamTier::Fill(uint64_t line, uint32_t first, uint32_t end, const uint8_t* data) {
  if (!on()) return;
  for (uint64_t key = line * blocks_per_line_ + first, last = line * blocks_per_line_ + end; key < last;
       ++key, data += kBlock) {
    Shard& shard = ShardOf(key);
    MutexLock lock(shard.mu);
    if (shard.capacity != 0 && shard.Find(key) == SIZE_MAX) shard.Insert(key, data);
  }
}

void RamTier::Forget(uint64_t line, uint32_t first, uint32_t end) {
  if (!on()) return;
  for (uint64_t key = line * blocks_per_line_ + first, last = line * blocks_per_line_ + end; key < last; ++key) {
    Shard& shard = ShardOf(key);
    MutexLock lock(shard.mu);
    if (shard.held == 0) continue;
    const size_t at = shard.Find(key);
    if (at != SIZE_MAX) shard.Erase(at);
  }
}

void RamTier::ForgetLines(uint64_t first, uint64_t end) {
  const uint64_t first_key = first * blocks_per_line_, end_key = end * blocks_per_line_;
  for (auto& shard : shards_) {
    MutexLock lock(shard->mu);
    for (uint32_t frame = 0; frame < shard->fresh; ++frame) {
      const uint64_t key = shard->key_of[frame];
      if (key == kNoKey || key < first_key || key >= end_key) continue;
      shard->Erase(shard->Find(key));
    }
  }
}

uint64_t RamTier::held_blocks() const {
  uint64_t held = 0;
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    held += shard->held;
  }
  return held;
}

size_t RamTier::MemoryBytes() const {
  size_t bytes = 0;
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    bytes += sizeof(Shard) + uint64_t{shard->fresh} * kBlock + shard->key_of.capacity() * sizeof(uint64_t) +
             shard->table.capacity() * sizeof(uint32_t) + shard->free.capacity() * sizeof(uint32_t);
    if (shard->policy) bytes += shard->policy->MemoryBytes();
  }
  return bytes;
}

}  // namespace cachecore
