// The slot table: lookup, block state, allocation and eviction, the dirty
// index and cleaning, pins, and the warm start's adoption of records.
#include "engine/slot_table.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "cachecore/engine/steps.h"

namespace cachecore {

namespace {
// Evicted lines remembered until a metadata sync; past this many,
// allocation asks for a sync (cheap next to the I/O that filled the cache).
constexpr size_t kMaxUnsyncedEvictions = 1 << 16;
// The candidates one allocation may refuse (dirty, being cleaned, their
// stripe busy): a cache full of dirty lines would otherwise be walked whole
// under mu_ for one request, which then goes around the cache anyway.
constexpr uint64_t kVictimRefusals = 32;
// The candidates a reactor looks at for one allocation, refused or given
// another round for their hits: a warm cache whose every line was hit
// would otherwise be walked three times over under mu_ for one miss.
constexpr uint64_t kReactorVictimLooks = 4096;
// The slots one allocation scans for a clean line when the policy's
// candidates were all refused: the cleaner keeps 2 % of the cache clean or
// free (the reserve), so 4,096 of them hold about 80 such lines.
constexpr uint64_t kReserveLooks = 4096;
}  // namespace

SlotTable::SlotTable(uint32_t capacity, uint32_t blocks_per_line, const CacheIdentity& identity,
                     uint64_t line_space, PolicyKind policy, uint32_t promote_after_hits, LiveStats& stats)
    : capacity_(capacity),
      blocks_per_line_(blocks_per_line),
      stats_(stats),
      lines_(capacity, (line_space + identity.line_size - 1) / identity.line_size),
      // One block a line: the counts are its flags.
      slot_valid_blocks_(blocks_per_line > 1 ? capacity : 0, 0),
      slot_dirty_blocks_(blocks_per_line > 1 ? capacity : 0, 0),
      block_crc_(size_t{capacity} * blocks_per_line, 0),
      epochs_(size_t{capacity} * blocks_per_line),
      block_flags_(size_t{capacity} * blocks_per_line, 0),
      index_(capacity, lines_),
      free_(capacity),
      dirty_slots_((size_t{capacity} + 63) / 64, 0),
      unsettled_records_((size_t{capacity} + 63) / 64),
      policy_(NewEvictionPolicy(policy, capacity, promote_after_hits,
                                [this](uint32_t slot) { return lines_.Get(slot); })),
      policy_kind_(policy),
      dirty_map_(identity, line_space) {}

uint64_t SlotTable::EnterWrite() {
  for (;;) {
    const uint64_t epoch = flushes_started_.load();
    writers_[epoch & 1].fetch_add(1);
    // Counted before a flush began (that flush waits for us) or seen late:
    // then again in the new epoch.
    if (flushes_started_.load() == epoch) return epoch;
    LeaveWrite(epoch);
  }
}

void SlotTable::LeaveWrite(uint64_t epoch) {
  if (writers_[epoch & 1].fetch_sub(1) == 1 && flushes_started_.load() != epoch) {
    MutexLock lock(writers_mu_);  // a flush may wait for the count to reach zero
    writers_left_.notify_all();
  }
}

uint64_t SlotTable::BeginFlush() {
  MutexLock order(flush_order_mu_);
  const uint64_t epoch = flushes_started_.fetch_add(1) + 1;
  const uint64_t previous = epoch - 1;
  ReachedStep("sync-1-epoch-begun");  // a test point: writers of `previous` may be in flight
  {
    MutexLock lock(writers_mu_);
    lock.Wait(writers_left_, [&] { return writers_[previous & 1].load() == 0; });
  }
  epochs_.Sweep(epoch, flushes_completed_.load());  // keeps the one-byte epochs decodable
  return epoch;
}

WriteEpoch::WriteEpoch(SlotTable& table) : table_(table), epoch_(table.EnterWrite()) {}
WriteEpoch::~WriteEpoch() { table_.LeaveWrite(epoch_); }

void SlotTable::CompleteFlush(uint64_t epoch) {
  uint64_t done = flushes_completed_.load();
  while (done < epoch && !flushes_completed_.compare_exchange_weak(done, epoch)) {
  }
}

// ---- looking up

std::optional<uint32_t> SlotTable::Lookup(uint64_t line, uint32_t b0, uint32_t b1) {
  MutexLock lock(mu_);
  const uint32_t slot = index_.Find(line);
  if (slot == LineIndex::kNotFound) return std::nullopt;
  for (uint32_t b = b0; b < b1; ++b) {
    if (Flags(slot, b) & kValid) {
      policy_->OnHit(slot);
      break;
    }
  }
  return slot;
}

std::optional<uint32_t> SlotTable::Find(uint64_t line) {
  MutexLock lock(mu_);
  const uint32_t slot = index_.Find(line);
  if (slot == LineIndex::kNotFound) return std::nullopt;
  return slot;
}

void SlotTable::FindEach(size_t count, const std::function<uint64_t(size_t)>& line_of,
                         std::vector<uint32_t>& out) {
  MutexLock lock(mu_);
  for (size_t i = 0; i < count; ++i) {
    static_assert(LineIndex::kNotFound == kNoSlot);
    out.push_back(index_.Find(line_of(i)));
  }
}

void SlotTable::NoteHits(std::span<const uint32_t> slots) {
  MutexLock lock(mu_);
  for (uint32_t slot : slots) {
    if (slot != kNoSlot) policy_->OnHit(slot);
  }
}

// ---- per-block state

void SlotTable::MarkValidClean(uint32_t slot, uint32_t block, uint32_t crc, uint64_t epoch) {
  size_t i = Index(slot, block);
  if (!(block_flags_[i] & kValid)) AddValidBlocks(slot, 1);
  if (block_flags_[i] & kDirty) MarkClean(slot, block);
  block_flags_[i] = kValid;
  block_crc_[i] = crc;
  epochs_.Set(i, epoch);
}

void SlotTable::MarkDirty(uint32_t slot, uint32_t block, uint32_t crc, bool overwritten,
                          uint64_t epoch) {
  size_t i = Index(slot, block);
  const uint8_t before = block_flags_[i];
  const bool over_clean = (before == kValid && IsStable(slot, block)) ||
                          OverCleanUnsynced(slot, block);
  if (!(before & kValid)) AddValidBlocks(slot, 1);
  if (!(before & kDirty)) {
    const bool first = DirtyBlocks(slot) == 0;
    AddDirtyBlocks(slot, 1);
    if (first) {
      CountLine(lines_.Get(slot), true, 1);
      MutexLock lock(mu_);
      SetSlotDirtyLocked(slot, true);
      dirty_lines_.Insert(lines_.Get(slot));
      dirty_map_.LineDirty(lines_.Get(slot));
    }
  }
  block_flags_[i] = kValid | kDirty | (overwritten ? kOverwritten : 0) | (over_clean ? kOverClean : 0);
  block_crc_[i] = crc;
  epochs_.Set(i, epoch);
}

void SlotTable::MarkClean(uint32_t slot, uint32_t block) {
  size_t i = Index(slot, block);
  if (!(block_flags_[i] & kDirty)) return;
  block_flags_[i] = kValid;
  AddDirtyBlocks(slot, -1);
  if (DirtyBlocks(slot) == 0) {
    const uint64_t line = lines_.Get(slot);
    CountLine(line, true, -1);
    MutexLock lock(mu_);
    SetSlotDirtyLocked(slot, false);
    dirty_lines_.Erase(line);
    const auto [first, end] = dirty_map_.RegionLines(line);
    dirty_map_.LineClean(line, dirty_lines_.AnyIn(first, end));
  }
}

void SlotTable::Invalidate(uint32_t slot, uint32_t block) {
  size_t i = Index(slot, block);
  if (!(block_flags_[i] & kValid)) return;
  MarkClean(slot, block);
  block_flags_[i] = 0;
  AddValidBlocks(slot, -1);
}

bool SlotTable::MarkCleanedIfUnchanged(uint32_t slot, uint32_t block, uint32_t crc) {
  size_t i = Index(slot, block);
  if (!(block_flags_[i] & kDirty) || block_crc_[i] != crc) return false;  // rewritten meanwhile
  MarkClean(slot, block);
  epochs_.Set(i, 0);  // durable on the origin now
  return true;
}

// kDirtyOverwritten accepts whatever 4 KiB the cache holds, which is true
// only once the data it overwrites is durable there. A block a running sync
// promises (MaybeStable) may not be flushed yet: that sync's cache flush
// may still be ahead, or may fail. Its data is flushed first.
bool SlotTable::PromisedButUnflushed(uint32_t slot, uint32_t b0, uint32_t b1, uint64_t epoch) const {
  for (uint32_t b = b0; b < b1; ++b) {
    if ((Flags(slot, b) & kDirty) && MaybeStable(slot, b, epoch) && !IsStable(slot, b)) return true;
  }
  return false;
}

bool SlotTable::MarkOverwrite(uint32_t slot, uint32_t b0, uint32_t b1, bool origin_write,
                              uint64_t epoch) {
  bool announce = false;
  for (uint32_t b = b0; b < b1; ++b) {
    size_t i = Index(slot, b);
    uint8_t f = block_flags_[i];
    if (!(f & kValid) || !MaybeStable(slot, b, epoch)) continue;
    if (f & kDirty) {
      block_flags_[i] |= kOverwritten;
    } else if (!origin_write) {
      continue;  // the origin keeps the old copy: a mismatch falls back to it
    }
    epochs_.Set(i, epoch);
    announce = true;
  }
  return announce;
}

LineRecord SlotTable::BuildRecord(uint32_t slot, bool settles) {
  // Built and applied under the slot's stripe, so the last record built is
  // the last put. Written only when it changes: a word covers 64 slots.
  const uint64_t bit = uint64_t{1} << (slot % 64);
  std::atomic<uint64_t>& word = unsettled_records_[slot / 64];
  const bool set = (word.load(std::memory_order_relaxed) & bit) != 0;
  if (settles && set) word.fetch_and(~bit, std::memory_order_relaxed);
  if (!settles && !set) word.fetch_or(bit, std::memory_order_relaxed);
  LineRecord r;
  r.origin_line = lines_.Get(slot);
  r.epoch = settles ? flushes_started_.load() : kNoEpoch;  // every block's epoch is at most this
  r.classes.resize(blocks_per_line_);
  r.crcs.resize(blocks_per_line_);
  for (uint32_t b = 0; b < blocks_per_line_; ++b) {
    size_t i = Index(slot, b);
    uint8_t f = block_flags_[i];
    r.crcs[b] = block_crc_[i];
    bool stable = IsStable(slot, b);
    if (!(f & kValid)) r.classes[b] = BlockClass::kInvalid;
    else if (!(f & kDirty)) r.classes[b] = stable ? BlockClass::kClean : BlockClass::kCleanFresh;
    else if (stable) r.classes[b] = BlockClass::kDirty;
    else if (f & kOverwritten) r.classes[b] = BlockClass::kDirtyOverwritten;
    else r.classes[b] = BlockClass::kDirtyFresh;
  }
  return r;
}

// ---- allocation and eviction

std::vector<uint32_t> SlotTable::SlotsWithUnsettledRecords() {
  std::vector<uint32_t> out;
  for (size_t w = 0; w < unsettled_records_.size(); ++w) {
    for (uint64_t bits = unsettled_records_[w].load(); bits != 0; bits &= bits - 1) {
      const auto slot = static_cast<uint32_t>(w * 64 + std::countr_zero(bits));
      if (lines_.Get(slot) != kNoLine && ValidBlocks(slot) > 0) out.push_back(slot);
    }
  }
  return out;
}

void SlotTable::EvictLocked(uint32_t slot) {
  index_.Erase(lines_.Get(slot));
  policy_->OnRemove(slot);
  for (uint32_t b = 0; b < blocks_per_line_; ++b) block_flags_[Index(slot, b)] = 0;
  if (blocks_per_line_ > 1) {
    slot_valid_blocks_[slot] = 0;
    slot_dirty_blocks_[slot] = 0;
  }
  SetSlotDirtyLocked(slot, false);
  CountLine(lines_.Get(slot), false, -1);
  lines_.Set(slot, kNoLine);
}

void SlotTable::CountLine(uint64_t line, bool dirty, int delta) {
  const auto n = static_cast<uint64_t>(int64_t{delta});
  LiveStats::Bump(dirty ? stats_.dirty_lines : stats_.occupancy_lines, n);
  if (LiveVolume* v = VolumeOfLine(line)) LiveStats::Bump(dirty ? v->counters.dirty_lines : v->counters.occupancy_lines, n);
}

void SlotTable::ListEvictionLocked(uint64_t line) { unsynced_evictions_[line] = ++evictions_listed_; }

// Gives `slot` to `line`. True when so many evictions wait for a sync that
// the caller should sync now.
bool SlotTable::TakeSlotLocked(uint32_t slot, uint64_t line) {
  lines_.Set(slot, line);
  index_.Insert(line, slot);
  if (pins_.Contains(line)) {
    insert_seen_ = false;  // pinned: never a victim, not under the policy
  } else if (std::exchange(insert_seen_, false)) {
    policy_->OnRestore(slot, line);
  } else {
    policy_->OnInsert(slot, line);
  }
  CountLine(line, false, 1);
  LiveStats::Bump(stats_.promotions);
  return unsynced_evictions_.size() > kMaxUnsyncedEvictions;
}

std::optional<uint32_t> SlotTable::PickVictimLocked(uint64_t incoming, VictimHandler& victims,
                                                    uint64_t max_looks) {
  uint64_t refused = 0, refused_dirty = 0;
  std::optional<uint32_t> victim = policy_->PickVictim(
      incoming, [&](uint32_t s) {
        mu_.AssertHeld();  // the policy calls back under mu_
        ++refused;  // unless claimed, below
        if (cleaning_.count(lines_.Get(s)) || SlotDirtyLocked(s)) {  // never cleaned for a request
          ++refused_dirty;
          return false;
        }
        if (!victims.Claim(lines_.Get(s))) return false;
        --refused;
        return true;
      },
      kVictimRefusals, max_looks);
  if (victim) return victim;
  // The policy gave up on dirty candidates: look past them. Not when it
  // chose to keep the line out (W-TinyLFU's admission) or ran out of looks
  // among lines with hits (a reactor's bound): those are its choices.
  if (refused < kVictimRefusals || refused_dirty == 0) return std::nullopt;
  victim = FindCleanSlotLocked(victims);
  // The policy saw this miss in PickVictim; the insert is not a second one.
  insert_seen_ = victim.has_value();
  return victim;
}

// The cleaner cleans in origin order, so the clean lines of a cache near
// all dirty lie anywhere in the policy's order, mostly past the few
// candidates it may refuse: without this look the misses of such a cache
// went around it with the reserve's lines at hand. Such a victim leaves
// no ghost in the policy (it did not choose it).
std::optional<uint32_t> SlotTable::FindCleanSlotLocked(VictimHandler& victims) {
  const uint64_t looks = std::min<uint64_t>(kReserveLooks, capacity_);
  for (uint64_t n = 0; n < looks; ++n) {
    const uint32_t s = reserve_cursor_;
    reserve_cursor_ = reserve_cursor_ + 1 == capacity_ ? 0 : reserve_cursor_ + 1;
    if (SlotDirtyLocked(s)) continue;
    const uint64_t line = lines_.Get(s);
    if (line == kNoLine || pins_.Contains(line) || cleaning_.count(line)) continue;
    if (victims.Claim(line)) return s;
  }
  return std::nullopt;
}

std::optional<uint32_t> SlotTable::TakeFreeSlot(uint64_t line, bool& sync_due) {
  MutexLock lock(mu_);
  sync_due = false;
  if (free_.empty()) return std::nullopt;
  const uint32_t slot = free_.Take();
  sync_due = TakeSlotLocked(slot, line);
  return slot;
}

bool SlotTable::TakeFreeSlots(std::span<const uint64_t> lines, std::vector<uint32_t>& out,
                              bool& sync_due) {
  MutexLock lock(mu_);
  sync_due = false;
  if (free_.size() < lines.size()) return false;
  for (uint64_t line : lines) {
    out.push_back(free_.Take());
    sync_due = TakeSlotLocked(out.back(), line) || sync_due;
  }
  return true;
}

std::optional<uint32_t> SlotTable::TakeSlotWithoutWaiting(uint64_t line, VictimHandler& victims,
                                                          uint64_t& evicted, bool& sync_due) {
  MutexLock lock(mu_);
  evicted = kNoLine;
  sync_due = false;
  if (!free_.empty()) {
    const uint32_t slot = free_.Take();
    sync_due = TakeSlotLocked(slot, line);
    return slot;
  }
  std::optional<uint32_t> victim = PickVictimLocked(line, victims, kReactorVictimLooks);
  if (!victim) return std::nullopt;
  evicted = lines_.Get(*victim);
  EvictLocked(*victim);
  LiveStats::Bump(stats_.evictions);
  sync_due = TakeSlotLocked(*victim, line);
  return victim;
}

void SlotTable::ListEvictions(std::span<const uint64_t> lines) {
  if (lines.empty()) return;
  MutexLock lock(mu_);
  for (uint64_t line : lines) ListEvictionLocked(line);
}

size_t SlotTable::FreeSlots() {
  MutexLock lock(mu_);
  return free_.size();
}

std::optional<uint32_t> SlotTable::Allocate(uint64_t line, VictimHandler& victims, bool& sync_due) {
  MutexLock lock(mu_);
  sync_due = false;
  if (!free_.empty()) {
    const uint32_t slot = free_.Take();
    sync_due = TakeSlotLocked(slot, line);
    return slot;
  }
  std::optional<uint32_t> victim = PickVictimLocked(line, victims, UINT64_MAX);
  if (!victim) return std::nullopt;
  return HandOver(*victim, line, victims, sync_due);
}

// The victim's slot goes to `line`. Its old record is deleted in the store,
// and the eviction listed, before the victim's stripe is released: a writer
// of the victim's line must find the eviction listed.
uint32_t SlotTable::HandOver(uint32_t slot, uint64_t line, VictimHandler& victims, bool& sync_due) {
  const uint64_t old_line = lines_.Get(slot);
  MetadataStore::Batch batch;
  EvictLocked(slot);
  batch.DeleteLine(slot);
  LiveStats::Bump(stats_.evictions);
  sync_due = TakeSlotLocked(slot, line);
  mu_.Unlock();
  victims.ApplyDelete(batch);
  mu_.Lock();
  ListEvictionLocked(old_line);
  victims.ReleaseClaim();
  return slot;
}

void SlotTable::ReleaseIfEmpty(uint32_t slot, RecordBatch& batch) {
  if (ValidBlocks(slot) != 0) return;
  {
    MutexLock lock(mu_);
    batch.emptied.emplace_back(lines_.Get(slot), slot);
    EvictLocked(slot);
    batch.records.DeleteLine(slot);
  }
  ReachedStep("release-1-emptied");  // a test point: the slot is not free yet
}

bool SlotTable::EvictIfDemotable(uint32_t slot, uint64_t line, RecordBatch& batch) {
  MutexLock lock(mu_);
  if (lines_.Get(slot) != line || SlotDirtyLocked(slot) || cleaning_.count(line) ||
      pins_.Contains(line)) {
    return false;  // changed meanwhile
  }
  batch.emptied.emplace_back(line, slot);
  EvictLocked(slot);
  batch.records.DeleteLine(slot);
  LiveStats::Bump(stats_.evictions);
  return true;
}

std::optional<uint64_t> SlotTable::DemotionCandidate(uint32_t slot) {
  MutexLock lock(mu_);
  const uint64_t line = lines_.Get(slot);
  if (line == kNoLine || pins_.Contains(line) || cleaning_.count(line)) return std::nullopt;
  return line;
}

void SlotTable::FreeEmptied(const RecordBatch& batch) {
  if (batch.emptied.empty()) return;
  MutexLock lock(mu_);
  for (const auto& [line, slot] : batch.emptied) {
    ListEvictionLocked(line);
    free_.Put(slot);
  }
}

// ---- evictions not yet synced

bool SlotTable::AnyRecentlyEvicted(std::span<const uint64_t> lines) {
  MutexLock lock(mu_);
  if (unsynced_evictions_.empty()) return false;
  return std::any_of(lines.begin(), lines.end(), [&](uint64_t l) {
    mu_.AssertHeld();
    return unsynced_evictions_.count(l) > 0;
  });
}

uint64_t SlotTable::EvictionsListed() {
  MutexLock lock(mu_);
  return evictions_listed_;
}

void SlotTable::ForgetEvictions(uint64_t listed) {
  MutexLock lock(mu_);
  // Only what was listed before the sync began is durable now (each listing
  // follows its delete into the store); an eviction listed meanwhile waits
  // for the next sync.
  if (evictions_listed_ == listed) {
    // Swapped, not cleared: a cleared map keeps its buckets, sized for the
    // most evictions that ever waited (up to 64Ki: half a megabyte).
    std::unordered_map<uint64_t, uint64_t>().swap(unsynced_evictions_);
  } else {
    std::erase_if(unsynced_evictions_, [&](const auto& e) { return e.second <= listed; });
  }
}

// ---- the dirty index and cleaning

std::vector<uint64_t> SlotTable::NextDirtyLines(uint64_t max) {
  std::vector<uint64_t> lines;
  MutexLock lock(mu_);
  dirty_lines_.AppendRange(clean_cursor_, kNoLine, max, lines);
  dirty_lines_.AppendRange(0, clean_cursor_, max, lines);  // wrapped around
  if (!lines.empty()) clean_cursor_ = lines.back() + 1;
  return lines;
}

bool SlotTable::AllDirty(uint64_t first_line, uint64_t last_line) {
  MutexLock lock(mu_);
  for (uint64_t line = first_line; line <= last_line; ++line) {
    if (!dirty_lines_.Contains(line)) return false;
  }
  return true;
}

std::vector<uint64_t> SlotTable::DirtyLines(uint64_t first, uint64_t end) {
  MutexLock lock(mu_);
  std::vector<uint64_t> lines;
  if (first == 0 && end == kNoLine) lines.reserve(dirty_lines_.size());
  dirty_lines_.AppendRange(first, end, SIZE_MAX, lines);
  return lines;
}

std::vector<uint64_t> SlotTable::CachedLinesIn(uint64_t first, uint64_t end) {
  MutexLock lock(mu_);
  std::vector<uint64_t> lines;
  ForEachCachedLineLocked(first, end, [&](uint32_t, uint64_t line) { lines.push_back(line); });
  return lines;
}

void SlotTable::ResizeDirtyMap(const CacheIdentity& identity, uint64_t line_space) {
  MutexLock lock(mu_);
  if (dirty_map_.SameGeometry(identity, line_space)) return;  // AddVolume resized it before publishing
  DirtyMap resized(identity, line_space);
  std::vector<uint64_t> dirty;
  dirty_lines_.AppendRange(0, kNoLine, SIZE_MAX, dirty);
  for (uint64_t line : dirty) resized.LineDirty(line);
  resized.MarkAllChanged();
  dirty_map_ = std::move(resized);
}

std::optional<uint32_t> SlotTable::BeginCleaning(uint64_t line, bool& busy) {
  MutexLock lock(mu_);
  busy = false;
  const uint32_t slot = index_.Find(line);
  if (slot == LineIndex::kNotFound || !SlotDirtyLocked(slot)) return std::nullopt;
  if (!cleaning_.insert(line).second) {  // another cleaner has it
    busy = true;
    return std::nullopt;
  }
  cleaning_count_.fetch_add(1);
  return slot;
}

void SlotTable::EndCleaning(std::span<const uint64_t> lines) {
  // A pass that began cleaning no line ends none: whoever is parked waits
  // for a line still being cleaned, and is woken when that ends.
  if (lines.empty()) return;
  std::vector<StripeWaiter*> woken;
  {
    MutexLock lock(mu_);
    for (uint64_t line : lines) cleaning_.erase(line);
    cleaning_count_.fetch_sub(lines.size());
    woken.swap(cleaning_waiters_);
  }
  cleaning_done_.notify_all();
  // Every parked request tries again (one still behind a line being
  // cleaned parks again): cleaning ends a batch at a time, rarely.
  for (StripeWaiter* w : woken) w->Unparked();
}

bool SlotTable::ParkWhileCleaning(uint64_t first_line, uint64_t last_line, StripeWaiter* waiter) {
  MutexLock lock(mu_);
  for (uint64_t line : cleaning_) {
    if (line < first_line || line > last_line) continue;
    cleaning_waiters_.push_back(waiter);
    return true;
  }
  return false;
}

void SlotTable::WaitWhileCleaning(uint64_t first_line, uint64_t last_line) {
  if (cleaning_count_.load() == 0) return;  // the common case: no lock taken
  MutexLock lock(mu_);
  lock.Wait(cleaning_done_, [&] {
    mu_.AssertHeld();
    for (uint64_t line : cleaning_) {
      if (line >= first_line && line <= last_line) return false;
    }
    return true;
  });
}

bool SlotTable::AnyBeingCleaned(uint64_t first_line, uint64_t last_line) {
  if (cleaning_count_.load() == 0) return false;
  MutexLock lock(mu_);
  for (uint64_t line : cleaning_) {
    if (line >= first_line && line <= last_line) return true;
  }
  return false;
}

// ---- the dirty-region map

std::vector<std::pair<uint64_t, AlignedBuffer>> SlotTable::TakeChangedDirtyPages(bool all) {
  MutexLock lock(mu_);
  return dirty_map_.TakeChangedPages(all);
}

void SlotTable::MarkAllDirtyPagesChanged() {
  MutexLock lock(mu_);
  dirty_map_.MarkAllChanged();
}

// ---- pins

template <typename Fn>
void SlotTable::ForEachCachedLineLocked(uint64_t first, uint64_t end, Fn fn) {
  if (end - first <= index_.size()) {
    for (uint64_t line = first; line < end; ++line) {
      if (const uint32_t slot = index_.Find(line); slot != LineIndex::kNotFound) fn(slot, line);
    }
    return;
  }
  for (uint32_t slot = 0; slot < capacity_; ++slot) {
    const uint64_t line = lines_.Get(slot);
    if (line != kNoLine && line >= first && line < end) fn(slot, line);
  }
}

LineIntervals SlotTable::Pins() {
  MutexLock lock(mu_);
  return pins_;
}

void SlotTable::ReplacePins(LineIntervals next, std::span<const LineIntervals::Interval> changed,
                            bool pinning) {
  MutexLock lock(mu_);
  pins_ = std::move(next);
  for (auto [a, b] : changed) {
    // Pinned lines leave the policy; unpinned ones come back as newly inserted.
    ForEachCachedLineLocked(a, b, [&](uint32_t slot, uint64_t line) {
      mu_.AssertHeld();
      if (pinning) policy_->OnRemove(slot);
      else policy_->OnRestore(slot, line);
    });
  }
}

std::optional<uint64_t> SlotTable::NextPinAtOrAfter(uint64_t line) {
  MutexLock lock(mu_);
  return pins_.NextAtOrAfter(line);
}

uint64_t SlotTable::PinnedLines() {
  MutexLock lock(mu_);
  return pins_.total();
}

std::vector<SlotTable::PinnedInterval> SlotTable::PinnedWithResidency() {
  MutexLock lock(mu_);
  std::vector<PinnedInterval> out;
  for (auto [a, b] : pins_.intervals()) {
    uint64_t cached = 0;
    ForEachCachedLineLocked(a, b, [&](uint32_t, uint64_t) { ++cached; });
    out.push_back({a, b, cached});
  }
  return out;
}

std::pair<bool, bool> SlotTable::ResidentAndRoom(uint64_t line) {
  MutexLock lock(mu_);
  return {pins_.Contains(line) || index_.Find(line) != LineIndex::kNotFound, !free_.empty()};
}

uint64_t SlotTable::CachedLines(uint64_t first, uint64_t end) {
  MutexLock lock(mu_);
  uint64_t n = 0;
  ForEachCachedLineLocked(first, end, [&](uint32_t, uint64_t) { ++n; });
  return n;
}

// ---- memory

SlotTable::Memory SlotTable::MemoryBytes() {
  MutexLock lock(mu_);
  Memory m;
  m.per_slot = lines_.MemoryBytes() + (slot_valid_blocks_.capacity() + slot_dirty_blocks_.capacity()) * 2 +
               block_crc_.capacity() * 4 + epochs_.MemoryBytes() + block_flags_.capacity() +
               free_.MemoryBytes() + (dirty_slots_.capacity() + unsettled_records_.size()) * 8;
  m.index = index_.MemoryBytes();
  m.policy = policy_->MemoryBytes();
  m.dirty_lines = dirty_lines_.MemoryBytes();
  // An unordered_map node: next pointer, key, value, cached hash; plus its bucket.
  m.other = dirty_map_.MemoryBytes() + unsynced_evictions_.size() * 40 +
            unsynced_evictions_.bucket_count() * 8;
  return m;
}

std::string SlotTable::PolicyState() {
  MutexLock lock(mu_);
  const std::string state = policy_->Describe();
  return state.empty() ? PolicyName(policy_kind_) : state;
}

}  // namespace cachecore
