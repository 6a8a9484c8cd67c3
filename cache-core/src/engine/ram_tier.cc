#include "engine/ram_tier.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <utility>

#include "base/mix64.h"

namespace cachecore {

namespace {

constexpr uint64_t kNoKey = UINT64_MAX;
constexpr uint32_t kNoFrame = UINT32_MAX;
constexpr uint64_t kHugePage = 2 << 20;

// The frames' memory: untouched until a block is copied in, in huge pages
// where the kernel gives them for the asking (Debian's default: madvise).
// A read from RAM touches a new page per block; with 4 KiB pages each costs
// a TLB miss and a page walk. Only whole huge pages inside the arena are
// asked for, so the memory taken never passes the arena's size.
struct ArenaDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Arena = std::unique_ptr<uint8_t, ArenaDeleter>;

Arena NewArena(uint64_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, bytes) != 0) return nullptr;
  if (const uint64_t huge = bytes / kHugePage * kHugePage; huge > 0) {
    (void)madvise(p, huge, MADV_HUGEPAGE);  // a hint: without it, 4 KiB pages
  }
  return Arena(static_cast<uint8_t*>(p));
}

}  // namespace

// One shard: frames of 4 KiB, the key (line-space block) of each, an
// open-addressed table of (key, frame) (linear probing, deletion by
// backward shift: no allocation per block), and the frames' policy.
struct RamTier::Shard {
  struct Entry {
    uint64_t key = kNoKey;
    uint32_t frame = kNoFrame;
  };

  mutable Mutex mu;
  Arena frames GUARDED_BY(mu);
  std::vector<uint64_t> key_of GUARDED_BY(mu);  // per frame, for the policy
  std::vector<Entry> table GUARDED_BY(mu);
  std::vector<uint32_t> free GUARDED_BY(mu);  // frames given back
  uint32_t capacity GUARDED_BY(mu) = 0;
  uint32_t fresh GUARDED_BY(mu) = 0;  // frames below this were handed out once
  uint64_t held GUARDED_BY(mu) = 0;
  std::unique_ptr<EvictionPolicy> policy GUARDED_BY(mu);

  // What a Resize gives a shard, made before it takes the shard's lock
  // (allocation may fail, and takes its time): swapped in whole.
  struct Contents {
    Arena frames;
    std::vector<uint64_t> key_of;
    std::vector<Entry> table;
    std::vector<uint32_t> free;
    uint32_t capacity = 0;
    std::unique_ptr<EvictionPolicy> policy;
  };
  // False when the memory is refused (nothing then changes).
  bool Build(uint32_t frames_wanted, Contents& c) const noexcept {
    try {
      c.capacity = frames_wanted;
      c.key_of.assign(frames_wanted, kNoKey);
      c.free.reserve(frames_wanted);  // no allocation when blocks are forgotten
      c.table.assign(frames_wanted == 0 ? 0 : std::bit_ceil(uint64_t{frames_wanted} * 2), Entry{});
      if (frames_wanted == 0) return true;
      c.frames = NewArena(uint64_t{frames_wanted} * kBlock);
      if (!c.frames) return false;
      // Runs under `mu`, once these contents are the shard's (PickVictim
      // is called with it held).
      c.policy = NewS3FifoPolicy(frames_wanted, /*promote_after=*/1,
                                 [this](uint32_t frame) NO_THREAD_SAFETY_ANALYSIS { return key_of[frame]; });
      return true;
    } catch (const std::bad_alloc&) {
      return false;
    }
  }
  // Takes `c` (empty), giving back what it held: freed by the caller,
  // after the lock. Nothing here allocates or throws.
  void Take(Contents& c) REQUIRES(mu) {
    std::swap(frames, c.frames);
    key_of.swap(c.key_of);
    table.swap(c.table);
    free.swap(c.free);
    std::swap(capacity, c.capacity);
    policy.swap(c.policy);
    fresh = 0;
    held = 0;
  }

  size_t Mask() const REQUIRES(mu) { return table.size() - 1; }
  size_t Home(uint64_t key) const REQUIRES(mu) { return Mix64(key) & Mask(); }

  // The table position of `key`, or SIZE_MAX.
  size_t Find(uint64_t key) const REQUIRES(mu) {
    if (capacity == 0) return SIZE_MAX;
    for (size_t i = Home(key);; i = (i + 1) & Mask()) {
      if (table[i].frame == kNoFrame) return SIZE_MAX;
      if (table[i].key == key) return i;
    }
  }

  uint8_t* Frame(uint32_t frame) REQUIRES(mu) { return frames.get() + uint64_t{frame} * kBlock; }

  void Erase(size_t at) REQUIRES(mu) {
    const uint32_t frame = table[at].frame;
    policy->OnRemove(frame);
    key_of[frame] = kNoKey;
    free.push_back(frame);
    --held;
    // Backward shift: entries after the hole that could sit in it move up.
    size_t hole = at;
    for (size_t j = (hole + 1) & Mask(); table[j].frame != kNoFrame; j = (j + 1) & Mask()) {
      const size_t home = Home(table[j].key);
      const bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
      if (!movable) continue;
      table[hole] = table[j];
      hole = j;
    }
    table[hole] = Entry{};
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
    while (table[i].frame != kNoFrame) i = (i + 1) & Mask();
    table[i] = {key, frame};
    ++held;
    policy->OnInsert(frame, key);
  }
};

RamTier::RamTier(uint32_t blocks_per_line) : blocks_per_line_(blocks_per_line) {
  for (auto& shard : shards_) shard = std::make_unique<Shard>();
}

RamTier::~RamTier() = default;

void RamTier::LockEveryShard() const NO_THREAD_SAFETY_ANALYSIS {
  for (const auto& shard : shards_) shard->mu.lock();
}

void RamTier::UnlockEveryShard() const NO_THREAD_SAFETY_ANALYSIS {
  for (const auto& shard : shards_) shard->mu.unlock();
}

bool RamTier::Resize(uint64_t bytes) {
  const uint32_t count = static_cast<uint32_t>(std::clamp<uint64_t>(bytes / kShardBytes, 1, kShards));
  const uint32_t frames = static_cast<uint32_t>(std::min<uint64_t>(bytes / count / kBlock, UINT32_MAX / 2));
  MutexLock resizing(resize_mu_);
  // Made first, unlocked: requests go on meanwhile, and a size the memory
  // cannot hold leaves the tier as it was.
  std::array<Shard::Contents, kShards> made;
  for (uint32_t i = 0; i < kShards; ++i) {
    if (!shards_[i]->Build(i < count ? frames : 0, made[i])) return false;
  }
  LockEveryShard();  // no block moves while the shards change; nothing below throws
  if (frames > 0) active_.store(true);  // before any shard can take a block
  for (uint32_t i = 0; i < kShards; ++i) {
    Shard& shard = *shards_[i];
    shard.mu.AssertHeld();
    shard.Take(made[i]);
  }
  shard_count_.store(count);
  capacity_bytes_.store(uint64_t{frames} * count * kBlock, std::memory_order_relaxed);
  if (frames == 0) active_.store(false);  // every shard empty, and none can take a block
  UnlockEveryShard();
  return true;  // the old contents are freed here, unlocked
}

template <typename Fn>
void RamTier::ForEachRun(uint64_t key, uint64_t end, Fn fn) const {
  while (key < end) {
    const uint64_t run_end = std::min(end, (key / kGroup + 1) * kGroup);
    for (;;) {
      const uint32_t count = shard_count_.load();
      Shard& shard = *shards_[Mix64(key / kGroup) % count];
      MutexLock lock(shard.mu);
      if (shard_count_.load() != count) continue;  // resized since: another shard now
      if (!fn(shard, key, run_end)) return;
      break;
    }
    key = run_end;
  }
}

bool RamTier::Read(uint64_t line, uint32_t first, uint32_t end, uint8_t* out) {
  const uint64_t from = line * blocks_per_line_ + first, to = line * blocks_per_line_ + end;
  return ReadBlocks(from, to, out) == to - from;
}

uint64_t RamTier::ReadBlocks(uint64_t first, uint64_t end, uint8_t* out) {
  if (!on()) return 0;
  uint64_t copied = 0;
  ForEachRun(first, end, [&](Shard& shard, uint64_t key, uint64_t run_end) {
    shard.mu.AssertHeld();
    // Every frame first, each prefetched, then the copies: the frames'
    // misses overlap instead of each stalling its copy.
    uint32_t frames[kGroup];
    for (uint64_t k = key; k < run_end; ++k) {
      const size_t at = shard.Find(k);
      if (at == SIZE_MAX) return false;
      frames[k - key] = shard.table[at].frame;
      __builtin_prefetch(shard.Frame(frames[k - key]));
    }
    for (uint64_t k = key; k < run_end; ++k) {
      std::memcpy(out + (k - first) * kBlock, shard.Frame(frames[k - key]), kBlock);
      shard.policy->OnHit(frames[k - key]);
    }
    copied = run_end - first;
    return true;
  });
  return copied;
}

void RamTier::Fill(uint64_t line, uint32_t first, uint32_t end, const uint8_t* data) {
  if (!on()) return;
  const uint64_t base = line * blocks_per_line_;
  ForEachRun(base + first, base + end, [&](Shard& shard, uint64_t key, uint64_t run_end) {
    shard.mu.AssertHeld();
    if (shard.capacity == 0) return true;
    for (uint64_t k = key; k < run_end; ++k) {
      if (shard.Find(k) == SIZE_MAX) shard.Insert(k, data + (k - base - first) * kBlock);
    }
    return true;
  });
}

void RamTier::Forget(uint64_t line, uint32_t first, uint32_t end) {
  if (!on()) return;
  const uint64_t base = line * blocks_per_line_;
  ForEachRun(base + first, base + end, [&](Shard& shard, uint64_t key, uint64_t run_end) {
    shard.mu.AssertHeld();
    for (uint64_t k = key; k < run_end && shard.held > 0; ++k) {
      const size_t at = shard.Find(k);
      if (at != SIZE_MAX) shard.Erase(at);
    }
    return true;
  });
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
    // The frames handed out, in the huge pages they touched.
    const uint64_t arena = uint64_t{shard->capacity} * kBlock;
    const uint64_t touched = (uint64_t{shard->fresh} * kBlock + kHugePage - 1) / kHugePage * kHugePage;
    bytes += sizeof(Shard) + std::min(arena, touched) + shard->key_of.capacity() * sizeof(uint64_t) +
             shard->table.capacity() * sizeof(Shard::Entry) + shard->free.capacity() * sizeof(uint32_t);
    if (shard->policy) bytes += shard->policy->MemoryBytes();
  }
  return bytes;
}

}  // namespace cachecore
