// The slot table: which origin line each cache slot holds, the state of
// each 4 KiB block in it, and everything that decides where a line goes.
// Not a public header.
//
// Locking. `mu_` guards what is shared between lines: the map from origin
// lines to slots, the free slots, the eviction policy, the dirty index, the
// dirty-region map, the pins, the lines being cleaned and the evictions not
// yet synced. It is never held across I/O and never blocked on by a holder
// of it. A slot's per-block state (flags, checksum, epoch, counters) is
// guarded by the stripe of the line in it: the engine's cell lock, held
// across a segment's I/O. Methods marked "REQUIRES: the line's stripe"
// need it; the analysis cannot check a lock chosen by line, so they say so.
// A slot's line changes only with both mu_ and the stripes held, so it may
// be read under either.
//
// Durability. A slot leaves the cache in three steps: under mu_ it leaves
// the map (its record's delete goes into a batch); the engine applies the
// batch; only then is the slot free for another line and the eviction
// listed as unsynced (FreeEmptied, ListEviction). Freed any earlier,
// another thread could put its own record for the slot before the late
// delete, which would then remove it; listed earlier, a metadata sync could
// clear the listing before the delete it covers. Until a sync that began
// after the listing completes, every writer of the line's origin copy
// syncs first (AnyRecentlyEvicted): the old record may still say clean.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/stripe_lock.h"
#include "engine/block_epochs.h"
#include "engine/dirty_lines.h"
#include "engine/line_index.h"
#include "engine/volume_set.h"
#include "cachecore/metadata/dirty_map.h"
#include "cachecore/policy/eviction_policy.h"
#include "cachecore/metadata/metadata_store.h"
#include "cachecore/engine/stats.h"
#include "placement/line_intervals.h"
#include "base/thread_annotations.h"

namespace cachecore {

// Per-block flags in RAM.
enum BlockFlag : uint8_t {
  kValid = 1,
  kDirty = 2,
  // Rewritten in place over flushed dirty data since that data's last
  // flush: its durable record says kDirtyOverwritten.
  kOverwritten = 4,
  // Written back over a stable clean block, unannounced: until a sync
  // completes, the durable record may still call the older data clean, so
  // the cleaner syncs before the origin takes the new data.
  kOverClean = 8,
};

// A metadata batch and the slots it empties (origin line, slot): the engine
// applies the records, then FreeEmptied frees the slots.
struct RecordBatch {
  MetadataStore::Batch records;
  std::vector<std::pair<uint64_t, uint32_t>> emptied;
  bool empty() const { return records.empty(); }
};

// What Allocate needs from the engine to take a victim: the victim line's
// stripe, the cleaning of a dirty victim, and the delete of its record.
class VictimHandler {
 public:
  virtual ~VictimHandler() = default;
  // Called under mu_ (touch no slot-table state): whether the line may be
  // evicted now; true only if the caller holds its stripe or took it now.
  virtual bool Claim(uint64_t line) = 0;
  // mu_ released: applies the batch with the delete of the victim's record.
  virtual void ApplyDelete(MetadataStore::Batch& batch) = 0;
  // Lets go of a stripe Claim took, once the eviction is listed.
  virtual void ReleaseClaim() = 0;
};

// A block whose record is not stable, found at a warm start: proven
// against the cache device's data before it is served.
struct UnprovenBlock {
  uint32_t slot;
  uint32_t block;
  BlockClass cls;
};

class SlotTable;

// A write-back write's hold on its flush epoch (see SlotTable::EnterWrite).
class WriteEpoch {
 public:
  explicit WriteEpoch(SlotTable& table);
  ~WriteEpoch();
  WriteEpoch(const WriteEpoch&) = delete;
  WriteEpoch& operator=(const WriteEpoch&) = delete;
  uint64_t epoch() const { return epoch_; }

 private:
  SlotTable& table_;
  uint64_t epoch_;
};

class SlotTable {
 public:
  // `line_space`: bytes of the line space in use (VolumeSet::size_bytes()).
  SlotTable(uint32_t capacity, uint32_t blocks_per_line, const CacheIdentity& identity,
            uint64_t line_space, PolicyKind policy, uint32_t promote_after_hits, LiveStats& stats);

  uint32_t capacity() const { return capacity_; }
  uint32_t blocks_per_line() const { return blocks_per_line_; }
  // Counts each line's occupancy and dirtiness also for the volume of
  // `volumes` holding it. Before any line is taken or loaded.
  void CountVolumesIn(const VolumeSet* volumes) { volumes_ = volumes; }

  // ---- flush epochs: a write that completes while FlushesStarted() == e is
  // covered by flush e+1; it is durable once flush e+1 has completed.
  //
  // A write-back write holds its epoch (EnterWrite .. LeaveWrite, see
  // WriteEpoch) from before it decides what to announce until its record
  // is put, and decides by that epoch alone. A flush that begins meanwhile
  // waits for it before flushing anything (BeginFlush), so it covers the
  // write whole: its data before the flush's cache flush, its record before
  // the flush's store sync. Otherwise a flush could promise the older data
  // of a block the write replaces unannounced (no flush had begun since
  // that data was written) while the write's fresh record, durable without
  // its data or over data the write replaced, rejects it at recovery.
  uint64_t FlushesStarted() const { return flushes_started_.load(); }
  uint64_t EnterWrite();
  void LeaveWrite(uint64_t epoch);
  // Starts flush epoch+1 and returns it once no write of an earlier epoch
  // is in flight. One flush at a time gets this far.
  uint64_t BeginFlush() EXCLUDES(flush_order_mu_, writers_mu_);
  void CompleteFlush(uint64_t epoch);

  // ---- looking up (take mu_)
  // The slot of `line`, if cached. Tells the policy of a hit when a block in
  // [b0, b1) is valid. REQUIRES: the line's stripe (flags are stable).
  std::optional<uint32_t> Lookup(uint64_t line, uint32_t b0, uint32_t b1) EXCLUDES(mu_);
  std::optional<uint32_t> Find(uint64_t line) EXCLUDES(mu_);
  // The slots of `count` lines (line_of(i) for each i), kNoSlot where not
  // cached, appended to `out`: one hold of mu_ for a batch's lines.
  // `line_of` runs under mu_: it may take no lock and not call back here.
  void FindEach(size_t count, const std::function<uint64_t(size_t)>& line_of,
                std::vector<uint32_t>& out) EXCLUDES(mu_);
  // Tells the policy of a hit on each slot (kNoSlot entries are skipped).
  void NoteHits(std::span<const uint32_t> slots) EXCLUDES(mu_);
  static constexpr uint32_t kNoSlot = UINT32_MAX;

  // ---- per-block state. REQUIRES: the line's stripe.
  uint64_t LineOf(uint32_t slot) const { return lines_.Get(slot); }
  uint8_t Flags(uint32_t slot, uint32_t block) const { return block_flags_[Index(slot, block)]; }
  uint32_t Crc(uint32_t slot, uint32_t block) const { return block_crc_[Index(slot, block)]; }
  uint32_t ValidBlocks(uint32_t slot) const {
    return blocks_per_line_ == 1 ? (block_flags_[slot] & kValid) : slot_valid_blocks_[slot];
  }
  // Durable as recorded: a sync that began after the block's last write
  // has completed.
  bool IsStable(uint32_t slot, uint32_t block) const {
    return EpochOf(slot, block) < flushes_completed_.load();
  }
  // Maybe durable as recorded: a sync that began after the block's last
  // write has begun by `epoch` (it may complete at any moment). What such a
  // sync promises must be announced before it is changed, even while the
  // sync runs (the stable-record rules in docs/design.md).
  bool MaybeStable(uint32_t slot, uint32_t block, uint64_t epoch) const {
    return EpochOf(slot, block) < epoch;
  }
  // Written back over stable clean data since the last completed sync: the
  // durable record may still call the older data clean (rule 3).
  bool OverCleanUnsynced(uint32_t slot, uint32_t block) const {
    return (Flags(slot, block) & kOverClean) && !IsStable(slot, block);
  }
  // State changes; they keep the counters, the dirty index and the
  // dirty-region map right (those parts under mu_, taken here).
  void MarkValidClean(uint32_t slot, uint32_t block, uint32_t crc, uint64_t epoch);
  void MarkDirty(uint32_t slot, uint32_t block, uint32_t crc, bool overwritten, uint64_t epoch);
  void MarkClean(uint32_t slot, uint32_t block);
  void Invalidate(uint32_t slot, uint32_t block);
  // The cleaner wrote the block to the origin and made it durable there:
  // calls it clean and stable, if it is still dirty with the data of `crc`.
  bool MarkCleanedIfUnchanged(uint32_t slot, uint32_t block, uint32_t crc);
  // A dirty block in [b0, b1) that a running sync promises (as of `epoch`)
  // but whose data may not be on the cache device durably yet: flush
  // before announcing.
  bool PromisedButUnflushed(uint32_t slot, uint32_t b0, uint32_t b1, uint64_t epoch) const;
  // Before blocks in [b0, b1) are rewritten in place (or, with
  // `origin_write`, their origin copy) in `epoch`: flags the ones whose
  // record a sync may promise (MaybeStable) as overwritten and moves them to
  // `epoch`. True when the slot's record must be synced before the write.
  bool MarkOverwrite(uint32_t slot, uint32_t b0, uint32_t b1, bool origin_write, uint64_t epoch);
  // The slot's record. With `settles`, for a slot with no I/O in flight
  // (built after its data landed): a start takes its fresh blocks as
  // stable once a flush that began after it has completed. Without, for an
  // announcement built ahead of the write it announces: proven at a start
  // until a later record replaces it (docs/design.md, "Warm start").
  // Remembers which slots' last record was built without `settles`.
  LineRecord BuildRecord(uint32_t slot, bool settles);
  // The slots whose last record was built without `settles` and which
  // still hold data (a clean shutdown puts them again, to be settled:
  // otherwise a start from the snapshot would leave records that a start
  // from the records rewrites). Nothing may run meanwhile.
  std::vector<uint32_t> SlotsWithUnsettledRecords();

  // ---- allocation and eviction
  // A slot for `line` (REQUIRES: its stripe): a free one, or the slot of a
  // clean line (not being cleaned) that `victims` claims among the first
  // few the policy looks at. A dirty victim is never cleaned for it (one
  // line written to the origin and flushed per request is what made misses
  // crawl in a cache full of dirty data): nothing when neither is at hand,
  // and the caller goes around the cache. `sync_due`: so many evictions
  // wait for a sync that the caller should sync now.
  std::optional<uint32_t> Allocate(uint64_t line, VictimHandler& victims, bool& sync_due)
      EXCLUDES(mu_);
  // The same without evicting (REQUIRES: the line's stripe): a free slot,
  // or nothing.
  std::optional<uint32_t> TakeFreeSlot(uint64_t line, bool& sync_due) EXCLUDES(mu_);
  // A free slot for each of `lines` (REQUIRES: their stripes), appended to
  // `out` in their order; all or, when too few are free, none (false).
  bool TakeFreeSlots(std::span<const uint64_t> lines, std::vector<uint32_t>& out, bool& sync_due)
      EXCLUDES(mu_);
  // A slot for `line` without waiting for anything (REQUIRES: its stripe):
  // a free one, or the slot of a clean line (not being cleaned) that
  // `victims` claims among the first few the policy looks at; nothing when
  // neither is at hand (as Allocate). A victim
  // leaves the map and `evicted` says its line (kNoLine: the slot was
  // free). The caller then puts the delete of the slot's old record in the
  // store ahead of any new record for it, lists the eviction
  // (ListEvictions), and only then lets the victim's stripe go, as
  // Allocate does.
  std::optional<uint32_t> TakeSlotWithoutWaiting(uint64_t line, VictimHandler& victims,
                                                 uint64_t& evicted, bool& sync_due) EXCLUDES(mu_);
  // Lists evictions whose records' deletes are in the store now.
  void ListEvictions(std::span<const uint64_t> lines) EXCLUDES(mu_);
  size_t FreeSlots() EXCLUDES(mu_);
  // Empties the slot when no block is valid any more (REQUIRES: the line's
  // stripe): it leaves the map, the delete of its record goes into `batch`.
  void ReleaseIfEmpty(uint32_t slot, RecordBatch& batch) EXCLUDES(mu_);
  // The same for a clean, unpinned line not being cleaned that is still in
  // `slot` (the mover's demotion; REQUIRES: the line's stripe). False when
  // any of that changed.
  bool EvictIfDemotable(uint32_t slot, uint64_t line, RecordBatch& batch) EXCLUDES(mu_);
  // The line in `slot` if it may be demoted (cached, unpinned, not being
  // cleaned), read without its stripe: a candidate, checked again later.
  std::optional<uint64_t> DemotionCandidate(uint32_t slot) EXCLUDES(mu_);
  // After `batch` was applied to the store: lists its evictions and frees
  // its slots.
  void FreeEmptied(const RecordBatch& batch) EXCLUDES(mu_);

  // ---- evictions not yet synced (rule 2)
  bool AnyRecentlyEvicted(std::span<const uint64_t> lines) EXCLUDES(mu_);
  // How many evictions were listed so far; after a sync that began when it
  // was `listed`, ForgetEvictions(listed) drops those listed up to then.
  uint64_t EvictionsListed() EXCLUDES(mu_);
  void ForgetEvictions(uint64_t listed) EXCLUDES(mu_);

  // ---- the dirty index and cleaning
  // Up to `max` dirty lines in origin order from where the last call ended,
  // wrapping around.
  std::vector<uint64_t> NextDirtyLines(uint64_t max) EXCLUDES(mu_);
  std::vector<uint64_t> DirtyLines(uint64_t first = 0, uint64_t end = kNoLine) EXCLUDES(mu_);
  // The cached lines of [first, end), in no particular order.
  std::vector<uint64_t> CachedLinesIn(uint64_t first, uint64_t end) EXCLUDES(mu_);
  // Whether RAM holds line numbers up to `lines` (the 4-byte form holds
  // fewer than 2^32 - 1; line_index.h).
  bool Addresses(uint64_t lines) const { return lines_.Holds(lines); }
  // The dirty-region map over `line_space` bytes from now on (a volume
  // added or removed), its regions set from the dirty lines; nothing when
  // the map has that geometry already. The caller writes every page
  // (PersistDirtyMap kAll) after.
  void ResizeDirtyMap(const CacheIdentity& identity, uint64_t line_space) EXCLUDES(mu_);
  // Whether every line from first_line to last_line (inclusive) has a
  // dirty block: a write over them adds no dirty line.
  bool AllDirty(uint64_t first_line, uint64_t last_line) EXCLUDES(mu_);
  // Marks `line` as being cleaned and returns its slot (REQUIRES: its
  // stripe); nothing when it is not cached, has no dirty block, or another
  // cleaner has it (`busy` then says which).
  std::optional<uint32_t> BeginCleaning(uint64_t line, bool& busy) EXCLUDES(mu_);
  void EndCleaning(std::span<const uint64_t> lines) EXCLUDES(mu_);
  // Returns once no line in [first_line, last_line] is being cleaned.
  void WaitWhileCleaning(uint64_t first_line, uint64_t last_line) EXCLUDES(mu_);
  // Whether a line in [first_line, last_line] is being cleaned now.
  bool AnyBeingCleaned(uint64_t first_line, uint64_t last_line) EXCLUDES(mu_);
  // A reactor's request that must not run while a line in [first_line,
  // last_line] is being cleaned: parked (true) until the next EndCleaning,
  // which calls waiter->Unparked() (the request then starts over), or
  // false when none is being cleaned any more (nothing parked).
  bool ParkWhileCleaning(uint64_t first_line, uint64_t last_line, StripeWaiter* waiter) EXCLUDES(mu_);

  // ---- the dirty-region map's pages to write (see DirtyMap)
  std::vector<std::pair<uint64_t, AlignedBuffer>> TakeChangedDirtyPages(bool all) EXCLUDES(mu_);
  void MarkAllDirtyPagesChanged() EXCLUDES(mu_);

  // ---- pins: pinned lines stay out of the eviction policy (so they are
  // never victims); a line enters the policy when it is allocated or
  // unpinned, unless pinned.
  LineIntervals Pins() EXCLUDES(mu_);
  // Puts `next` in force and moves the cached lines of `changed` out of the
  // policy (pinning) or back into it.
  void ReplacePins(LineIntervals next, std::span<const LineIntervals::Interval> changed,
                   bool pinning) EXCLUDES(mu_);
  std::optional<uint64_t> NextPinAtOrAfter(uint64_t line) EXCLUDES(mu_);
  uint64_t PinnedLines() EXCLUDES(mu_);
  struct PinnedInterval {
    uint64_t first, end;  // lines
    uint64_t cached;      // of them in the cache
  };
  std::vector<PinnedInterval> PinnedWithResidency() EXCLUDES(mu_);
  // For the mover: whether `line` is cached or pinned, and whether a slot
  // is free.
  std::pair<bool, bool> ResidentAndRoom(uint64_t line) EXCLUDES(mu_);
  uint64_t CachedLines(uint64_t first, uint64_t end) EXCLUDES(mu_);

  // ---- a warm start (nothing runs yet)
  // What a warm start knows: the origin's size in lines, the store's last
  // completed flush, whether the last shutdown was clean.
  struct LoadFrame {
    uint64_t origin_lines;
    uint64_t completed;
    bool clean_shutdown;
  };
  // Takes in the record of `slot`; blocks whose record is not stable are
  // appended to the part's `unproven`. A record built before the flush
  // `frame.completed` has its dirty fresh blocks taken as stable.
  // What one thread's share of a load gathers: AdoptRecord runs on several
  // threads at once, for disjoint slots (it touches only their own state).
  struct LoadPart {
    std::vector<UnprovenBlock> unproven;
    uint64_t epochs = 0;  // past every adopted record's epoch
  };
  Status AdoptRecord(uint64_t slot, const LineRecord& record, const LoadFrame& frame,
                     LoadPart& part);
  // Takes in a part's epochs once its thread is done.
  void AddLoadedEpochs(const LoadPart& part) { loaded_epochs_ = std::max(loaded_epochs_, part.epochs); }
  // Sets the state of a block whose record is not stable from the checksum
  // of what the cache holds (nothing: it cannot be read).
  void RecoverBlock(const UnprovenBlock& block, bool clean_shutdown,
                    std::optional<uint32_t> found_crc);
  // Counts, indexes and frees what the records left; slots whose records
  // no longer say what RAM does are appended to `changed_slots`. Flush
  // epochs go on past the records' and `completed`.
  // kCorruption when two records name one origin line.
  Status FinishLoad(std::vector<uint32_t>& changed_slots, uint64_t completed) EXCLUDES(mu_);

  // ---- the snapshot of a clean shutdown (nothing else runs: a shutdown or
  // a start). The arrays it holds, in its order: lines (two parts),
  // checksums, flags, and the flushes begun.
  std::vector<std::span<uint8_t>> SnapshotParts();
  // After a snapshot was read into SnapshotParts(): takes it in as a load
  // of a clean shutdown's records would (every block stable); FinishLoad
  // follows. kCorruption, with the table as before the read, when it does
  // not fit the geometry; ForgetSnapshot() too after a read that failed.
  Status AdoptSnapshot(uint64_t origin_lines);
  void ForgetSnapshot();

  // The heap bytes the table holds, per part (docs/design.md, "RAM per
  // line"): what a line of the cache costs in RAM.
  struct Memory {
    size_t per_slot;     // lines, counts, checksums, epochs, flags, bitmaps
    size_t index;        // origin line -> slot
    size_t policy;       // the eviction policy's queues and ghost
    size_t dirty_lines;  // the dirty lines in origin order
    size_t other;        // the dirty-region map, evictions not yet synced
    size_t total() const { return per_slot + index + policy + dirty_lines + other; }
  };
  Memory MemoryBytes() EXCLUDES(mu_);
  // The eviction policy and what it does now (StatsSnapshot::policy).
  std::string PolicyState() EXCLUDES(mu_);

  // Reports each broken invariant of the table to `problem`, for the
  // self-check; `recorded` says which slots the store has a record for.
  // Nothing may run meanwhile.
  void CheckInvariants(const std::vector<bool>& recorded,
                       const std::function<void(const std::string&)>& problem) EXCLUDES(mu_);

 private:
  // FinishLoad's indexing thread: indexes `kept`, and returns a slot whose
  // line another already has (kNotFound: none). mu_ is held by FinishLoad,
  // which joins the thread before it lets go: the analysis cannot see a
  // lock held on another thread's behalf.
  uint32_t IndexForFinishLoad(const std::vector<uint32_t>& kept) NO_THREAD_SAFETY_ANALYSIS;
  size_t Index(uint32_t slot, uint32_t block) const {
    return static_cast<size_t>(slot) * blocks_per_line_ + block;
  }
  uint64_t EpochOf(uint32_t slot, uint32_t block) const {
    return epochs_.Get(Index(slot, block), flushes_started_.load());
  }
  // REQUIRES: the line's stripe.
  uint32_t DirtyBlocks(uint32_t slot) const {
    return blocks_per_line_ == 1 ? (block_flags_[slot] & kDirty) >> 1 : slot_dirty_blocks_[slot];
  }
  void AddValidBlocks(uint32_t slot, int delta) {
    if (blocks_per_line_ > 1) slot_valid_blocks_[slot] = static_cast<uint16_t>(slot_valid_blocks_[slot] + delta);
  }
  void AddDirtyBlocks(uint32_t slot, int delta) {
    if (blocks_per_line_ > 1) slot_dirty_blocks_[slot] = static_cast<uint16_t>(slot_dirty_blocks_[slot] + delta);
  }
  // Whether the slot has a dirty block, kept under mu_ for the looks that
  // take no stripe (victims, demotion, cleaning).
  bool SlotDirtyLocked(uint32_t slot) const REQUIRES(mu_) {
    return (dirty_slots_[slot / 64] >> (slot % 64)) & 1;
  }
  void SetSlotDirtyLocked(uint32_t slot, bool dirty) REQUIRES(mu_) {
    const uint64_t bit = uint64_t{1} << (slot % 64);
    dirty_slots_[slot / 64] = dirty ? dirty_slots_[slot / 64] | bit : dirty_slots_[slot / 64] & ~bit;
  }
  // Takes the slot out of the map and the policy; the caller deletes its record.
  void EvictLocked(uint32_t slot) REQUIRES(mu_);
  bool TakeSlotLocked(uint32_t slot, uint64_t line) REQUIRES(mu_);
  void ListEvictionLocked(uint64_t line) REQUIRES(mu_);
  // A clean line not being cleaned that `victims` claims, before a few
  // candidates are refused, among at most `max_looks`, to make room for
  // the line `incoming`.
  std::optional<uint32_t> PickVictimLocked(uint64_t incoming, VictimHandler& victims, uint64_t max_looks)
      REQUIRES(mu_);
  // When the policy's candidates were all refused: a clean cached line,
  // neither pinned nor being cleaned, that `victims` claims, among the next
  // few slots from a rotating cursor (the reserve the cleaner keeps clean,
  // wherever its lines lie in the policy's order).
  std::optional<uint32_t> FindCleanSlotLocked(VictimHandler& victims) REQUIRES(mu_);
  uint32_t HandOver(uint32_t slot, uint64_t line, VictimHandler& victims, bool& sync_due)
      REQUIRES(mu_);
  template <typename Fn>
  void ForEachCachedLineLocked(uint64_t first, uint64_t end, Fn fn) REQUIRES(mu_);

  // Occupancy (`dirty` false) or dirty lines (true), for the cache and for
  // `line`'s volume, moved by `delta` (+1 or -1).
  void CountLine(uint64_t line, bool dirty, int delta);
  // The volume holding `line` (nullptr: none, or volumes are not counted).
  LiveVolume* VolumeOfLine(uint64_t line) const {
    return volumes_ ? volumes_->Find(line * blocks_per_line_ * uint64_t{4096}) : nullptr;
  }

  const uint32_t capacity_;
  const uint32_t blocks_per_line_;
  LiveStats& stats_;
  const VolumeSet* volumes_ = nullptr;

  // Per slot and per block; guarded by the stripe of the slot's line.
  PackedLines lines_;
  // Counts of valid and dirty blocks; empty with one block a line.
  std::vector<uint16_t> slot_valid_blocks_;
  std::vector<uint16_t> slot_dirty_blocks_;
  std::vector<uint32_t> block_crc_;
  BlockEpochs epochs_;  // flushes_started_ when last written
  std::vector<uint8_t> block_flags_;

  std::atomic<uint64_t> flushes_started_{1};
  uint64_t loaded_epochs_ = 0;  // past every adopted record's epoch (a warm start)
  uint64_t snapshot_started_ = 0;  // flushes_started_, in a snapshot
  std::atomic<uint64_t> flushes_completed_{1};
  // Write-back writes in flight, by the parity of their epoch: flushes begin
  // one at a time, so only the current epoch and the one before it can have
  // writers in flight.
  std::array<std::atomic<uint64_t>, 2> writers_{};
  Mutex flush_order_mu_;
  Mutex writers_mu_;
  std::condition_variable writers_left_;

  Mutex mu_;
  LineIndex index_ GUARDED_BY(mu_);
  FreeSlotBitmap free_ GUARDED_BY(mu_);
  std::vector<uint64_t> dirty_slots_ GUARDED_BY(mu_);  // a bit a slot
  // A bit a slot: its last record was built without `settles`. Set and
  // cleared under the slot's stripe, by threads holding other stripes
  // whose slots share the word: atomic.
  std::vector<std::atomic<uint64_t>> unsettled_records_;
  std::unique_ptr<EvictionPolicy> policy_ PT_GUARDED_BY(mu_);
  const PolicyKind policy_kind_;
  DirtyLineSet dirty_lines_ GUARDED_BY(mu_);
  DirtyMap dirty_map_ GUARDED_BY(mu_);
  LineIntervals pins_ GUARDED_BY(mu_);
  uint64_t clean_cursor_ GUARDED_BY(mu_) = 0;
  uint32_t reserve_cursor_ GUARDED_BY(mu_) = 0;  // FindCleanSlotLocked's next slot
  // The policy saw the miss of the next TakeSlotLocked already (a victim
  // FindCleanSlotLocked found): the insert comes under it as a restore.
  bool insert_seen_ GUARDED_BY(mu_) = false;
  // Lines whose dirty blocks are on their way to the origin with their
  // stripes released; never evicted meanwhile.
  std::unordered_set<uint64_t> cleaning_ GUARDED_BY(mu_);
  std::atomic<size_t> cleaning_count_{0};  // cleaning_.size(), read without mu_
  std::condition_variable cleaning_done_;
  std::vector<StripeWaiter*> cleaning_waiters_ GUARDED_BY(mu_);  // ParkWhileCleaning's
  // Lines evicted since the last metadata sync, with the order they were
  // listed in (see AnyRecentlyEvicted, ForgetEvictions).
  std::unordered_map<uint64_t, uint64_t> unsynced_evictions_ GUARDED_BY(mu_);
  uint64_t evictions_listed_ GUARDED_BY(mu_) = 0;
};

}  // namespace cachecore
