// The slot table: which origin line lives in which cache slot, the state of
// each 4 KiB block, allocation and eviction.
#include <algorithm>

#include "cachecore/steps.h"
#include "engine_impl.h"

namespace cachecore {

namespace {
// Evicted lines remembered until a metadata sync; past this many, allocation
// syncs (cheap next to the I/O that filled the cache).
constexpr size_t kMaxUnsyncedEvictions = 1 << 16;
}  // namespace

std::optional<uint32_t> Engine::Impl::Lookup(uint64_t line, uint32_t b0, uint32_t b1) {
  std::lock_guard lock(mu);
  auto it = map.find(line);
  if (it == map.end()) return std::nullopt;
  for (uint32_t b = b0; b < b1; ++b) {
    if (Flags(it->second, b) & kValid) {
      policy->OnHit(it->second);
      break;
    }
  }
  return it->second;
}

void Engine::Impl::EvictLocked(uint32_t slot, MetadataStore::Batch& batch) {
  map.erase(slot_line[slot]);
  policy->OnRemove(slot);
  for (uint32_t b = 0; b < blocks_per_line; ++b) block_flags[BlockIndex(slot, b)] = 0;
  slot_valid_blocks[slot] = 0;
  slot_dirty_blocks[slot] = 0;
  slot_line[slot] = kNoLine;
  batch.DeleteLine(slot);
  LiveStats::Bump(stats.occupancy_lines, static_cast<uint64_t>(-1));
}

void Engine::Impl::ListEvictionLocked(uint64_t line) { unsynced_evictions[line] = ++evictions_listed; }

Status Engine::Impl::Commit(RecordBatch& batch, bool sync) {
  Status s = dev.metadata->Apply(batch.records, sync);
  if (!s.ok()) LiveStats::Bump(stats.metadata_err);
  if (batch.emptied.empty()) return s;
  // Freed even when the delete failed: the next record for the slot
  // replaces the old one all the same.
  std::lock_guard lock(mu);
  for (const auto& [line, slot] : batch.emptied) {
    ListEvictionLocked(line);
    free_slots.push_back(slot);
  }
  return s;
}

std::optional<uint32_t> Engine::Impl::Allocate(uint64_t line) {
  const size_t my_stripe = StripeIndex(line);
  return Allocate(line, {&my_stripe, 1}, {});
}

// Gives `slot` to `line` (under mu). True when so many evictions wait for a
// sync that the caller should sync now.
bool Engine::Impl::TakeSlotLocked(uint32_t slot, uint64_t line) {
  slot_line[slot] = line;
  map[line] = slot;
  if (!pins.Contains(line)) policy->OnInsert(slot, line);  // pinned: never a victim
  LiveStats::Bump(stats.occupancy_lines);
  LiveStats::Bump(stats.promotions);
  return unsynced_evictions.size() > kMaxUnsyncedEvictions;
}

std::optional<uint32_t> Engine::Impl::Allocate(uint64_t line, std::span<const size_t> held,
                                               std::span<const Segment> keep) {
  std::unique_lock lock(mu);
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (!free_slots.empty()) {
      uint32_t slot = free_slots.back();
      free_slots.pop_back();
      bool many_unsynced = TakeSlotLocked(slot, line);
      lock.unlock();
      if (many_unsynced) (void)SyncMetadata();  // bounds the set; a failure is counted
      return slot;
    }
    // Cache full: take a victim whose stripe nobody else holds.
    std::mutex* locked_stripe = nullptr;
    std::optional<uint32_t> victim = policy->PickVictim([&](uint32_t s) {
      for (const Segment& k : keep) {
        if (k.line == slot_line[s]) return false;  // the caller is working on it
      }
      if (cleaning.count(slot_line[s])) return false;  // on its way to the origin
      size_t stripe = StripeIndex(slot_line[s]);
      if (std::binary_search(held.begin(), held.end(), stripe)) return true;  // we hold it already
      if (!stripes[stripe].try_lock()) return false;
      locked_stripe = &stripes[stripe];
      return true;
    });
    if (!victim) return std::nullopt;
    uint32_t v = *victim;
    if (slot_dirty_blocks[v] > 0) {
      // Dirty victim: clean it first. We hold its stripe, so nobody else
      // touches it while mu is released for the I/O.
      lock.unlock();
      Status cleaned = CleanSlots({v});
      lock.lock();
      if (!cleaned.ok()) {
        if (locked_stripe) locked_stripe->unlock();
        continue;  // the policy offers another victim next time round
      }
    }
    return ReuseVictim(v, line, lock, locked_stripe);
  }
  return std::nullopt;
}

// The victim's slot goes to `line`. Its old record is deleted in the store,
// and the eviction listed, before the victim's stripe is released: a writer
// of the victim's line must find the eviction listed (see RecordBatch).
uint32_t Engine::Impl::ReuseVictim(uint32_t slot, uint64_t line, std::unique_lock<std::mutex>& lock,
                                   std::mutex* victim_stripe) {
  const uint64_t old_line = slot_line[slot];
  MetadataStore::Batch batch;
  EvictLocked(slot, batch);
  LiveStats::Bump(stats.evictions);
  bool many_unsynced = TakeSlotLocked(slot, line);
  lock.unlock();
  if (!dev.metadata->Apply(batch, false).ok()) LiveStats::Bump(stats.metadata_err);
  lock.lock();
  ListEvictionLocked(old_line);
  lock.unlock();
  if (victim_stripe) victim_stripe->unlock();
  if (many_unsynced) (void)SyncMetadata();
  return slot;
}

LineRecord Engine::Impl::BuildRecord(uint32_t slot) const {
  LineRecord r;
  r.origin_line = slot_line[slot];
  r.classes.resize(blocks_per_line);
  r.crcs.resize(blocks_per_line);
  for (uint32_t b = 0; b < blocks_per_line; ++b) {
    size_t i = BlockIndex(slot, b);
    uint8_t f = block_flags[i];
    r.crcs[b] = block_crc[i];
    bool stable = IsStable(slot, b);
    if (!(f & kValid)) r.classes[b] = BlockClass::kInvalid;
    else if (!(f & kDirty)) r.classes[b] = stable ? BlockClass::kClean : BlockClass::kCleanFresh;
    else if (stable) r.classes[b] = BlockClass::kDirty;
    else if (f & kOverwritten) r.classes[b] = BlockClass::kDirtyOverwritten;
    else r.classes[b] = BlockClass::kDirtyFresh;
  }
  return r;
}

Status Engine::Impl::PutRecord(uint32_t slot, bool sync) {
  MetadataStore::Batch batch;
  batch.PutLine(slot, BuildRecord(slot));
  Status s = dev.metadata->Apply(batch, sync);
  if (!s.ok()) LiveStats::Bump(stats.metadata_err);
  return s;
}

void Engine::Impl::MarkValidClean(uint32_t slot, uint32_t block, uint32_t crc, uint64_t epoch) {
  size_t i = BlockIndex(slot, block);
  if (!(block_flags[i] & kValid)) ++slot_valid_blocks[slot];
  if (block_flags[i] & kDirty) MarkClean(slot, block);
  block_flags[i] = kValid;
  block_crc[i] = crc;
  block_epoch[i] = epoch;
}

void Engine::Impl::MarkDirty(uint32_t slot, uint32_t block, uint32_t crc, bool overwritten,
                             uint64_t epoch) {
  size_t i = BlockIndex(slot, block);
  if (!(block_flags[i] & kValid)) ++slot_valid_blocks[slot];
  if (!(block_flags[i] & kDirty) && slot_dirty_blocks[slot]++ == 0) {
    LiveStats::Bump(stats.dirty_lines);
    std::lock_guard lock(mu);
    dirty_index[slot_line[slot]] = slot;
    dirty_map.LineDirty(slot_line[slot]);
  }
  const uint8_t before = block_flags[i];
  const bool over_clean = (before == kValid && IsStable(slot, block)) ||
                          OverCleanUnsynced(slot, block);
  block_flags[i] = kValid | kDirty | (overwritten ? kOverwritten : 0) | (over_clean ? kOverClean : 0);
  block_crc[i] = crc;
  block_epoch[i] = epoch;
}

void Engine::Impl::MarkClean(uint32_t slot, uint32_t block) {
  size_t i = BlockIndex(slot, block);
  if (!(block_flags[i] & kDirty)) return;
  block_flags[i] = kValid;
  if (--slot_dirty_blocks[slot] == 0) {
    LiveStats::Bump(stats.dirty_lines, static_cast<uint64_t>(-1));
    std::lock_guard lock(mu);
    dirty_index.erase(slot_line[slot]);
    dirty_map.LineClean(slot_line[slot]);
  }
}

void Engine::Impl::Invalidate(uint32_t slot, uint32_t block) {
  size_t i = BlockIndex(slot, block);
  if (!(block_flags[i] & kValid)) return;
  MarkClean(slot, block);
  block_flags[i] = 0;
  --slot_valid_blocks[slot];
}

void Engine::Impl::ReleaseIfEmpty(uint32_t slot, RecordBatch& batch) {
  if (slot_valid_blocks[slot] != 0) return;
  {
    std::lock_guard lock(mu);
    batch.emptied.emplace_back(slot_line[slot], slot);
    EvictLocked(slot, batch.records);
  }
  ReachedStep("release-1-emptied");  // a test point: the slot is not free yet
}

void Engine::Impl::CountCacheError(std::atomic<uint64_t>& counter) {
  LiveStats::Bump(counter);
  if (cache_errors.fetch_add(1) + 1 >= config.error_threshold && !failed.exchange(true)) {
    // Past the threshold the cache device is not trusted for new data; the
    // cleaner keeps trying to move what is dirty to the origin.
    cleaner_cv.notify_all();
  }
}

}  // namespace cachecore
