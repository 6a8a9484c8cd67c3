// Engine internals shared by engine*.cc. Not a public header.
//
// Locking, from outside in:
// - stripes_[i]: a "cell" for every origin line hashing to i, held across the
//   I/O of one line segment (like dm's bio prison). A thread blocks on a
//   stripe only while it holds no other stripe; it may try_lock more.
// - mu_: the map from origin lines to slots, the free list, the policy, the
//   dirty index. Never held across I/O, never blocked on while holding it.
// Per-block state of a slot is guarded by the stripe of the line in it.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "admission.h"
#include "cachecore/engine.h"
#include "cachecore/dirty_map.h"
#include "cachecore/eviction_policy.h"
#include "heat_map.h"
#include "line_intervals.h"
#include "movement_log.h"

namespace cachecore {

constexpr uint32_t kBlockSize = 4096;
constexpr uint64_t kNoLine = UINT64_MAX;
constexpr size_t kStripes = 1024;

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

// One line's share of a request: origin line, byte range within the line.
struct Segment {
  uint64_t line;
  uint32_t begin;  // byte offset in the line
  uint32_t end;    // exclusive
  uint32_t first_block() const { return begin / kBlockSize; }
  uint32_t end_block() const { return (end + kBlockSize - 1) / kBlockSize; }
  bool block_aligned() const { return begin % kBlockSize == 0 && end % kBlockSize == 0; }
};

// A metadata batch and the slots it empties. A slot leaves the cache in
// three steps: under mu it leaves the map (EvictLocked); the batch, with
// the delete of its record, goes to the store (Commit); only then is the
// slot free for another line and the eviction listed as unsynced. Freed
// any earlier, another thread could write its own record for the slot
// before the late delete, which would then remove it; listed earlier, a
// metadata sync could clear the listing before the delete it covers.
struct RecordBatch {
  MetadataStore::Batch records;
  std::vector<std::pair<uint64_t, uint32_t>> emptied;  // (origin line, slot)
  bool empty() const { return records.empty(); }
};

struct LineBatch;  // engine_batch.cc
struct CleanJob;   // engine_cleaner.cc
struct MoverState;  // engine_mover.cc

struct Engine::Impl {
  Impl(const EngineDevices& devices, const EngineConfig& config, const CacheIdentity& identity);
  ~Impl();

  // ---- geometry
  uint64_t SlotOffset(uint32_t slot, uint32_t block) const {
    return kDataOffset + static_cast<uint64_t>(slot) * line_size + uint64_t{block} * kBlockSize;
  }
  uint64_t OriginOffset(uint64_t line, uint32_t block) const {
    return line * line_size + uint64_t{block} * kBlockSize;
  }
  // Origin lines, the last one maybe cut short by the origin's end.
  uint64_t OriginLines() const { return (identity.origin_size + line_size - 1) / line_size; }
  size_t BlockIndex(uint32_t slot, uint32_t block) const {
    return static_cast<size_t>(slot) * blocks_per_line + block;
  }
  std::mutex& StripeOf(uint64_t line) { return stripes[StripeIndex(line)]; }
  static size_t StripeIndex(uint64_t line) { return (line * 0x9E3779B97F4A7C15ull >> 32) % kStripes; }
  CacheMode EffectiveMode() const {
    return failed.load() ? CacheMode::kPassThrough : mode.load();
  }

  // ---- line table (engine_lines.cc)
  // The slot of `line`, if cached. Tells the policy of a hit when a block in
  // [b0, b1) is valid (caller holds the line's stripe, so flags are stable).
  std::optional<uint32_t> Lookup(uint64_t line, uint32_t b0, uint32_t b1);
  // A slot for `line` (caller holds its stripe). Evicts (cleaning first if
  // needed) when the cache is full. Nothing when every candidate is busy.
  std::optional<uint32_t> Allocate(uint64_t line);
  // The same for a caller that holds the stripes `held` (sorted): a victim
  // in them needs no lock, and the lines of `keep` are never victims.
  std::optional<uint32_t> Allocate(uint64_t line, std::span<const size_t> held,
                                   std::span<const Segment> keep);
  // Called under mu_: the line in `slot` leaves the cache (it is clean) and
  // `batch` gets the delete of its record. The caller applies the batch,
  // then lists the eviction (ListEvictionLocked) and frees or reuses the
  // slot, before it releases the line's stripe (see RecordBatch).
  void EvictLocked(uint32_t slot, MetadataStore::Batch& batch);
  bool TakeSlotLocked(uint32_t slot, uint64_t line);
  uint32_t ReuseVictim(uint32_t slot, uint64_t line, std::unique_lock<std::mutex>& lock,
                       std::mutex* victim_stripe);
  // Called under mu_ once the eviction's delete is in the store.
  void ListEvictionLocked(uint64_t line);
  // Applies `batch` to the store (synced with `sync`), then frees the slots
  // it emptied. Counts a failure.
  Status Commit(RecordBatch& batch, bool sync);
  LineRecord BuildRecord(uint32_t slot) const;
  // Block state changes (caller holds the stripe). Keep the counters and
  // the dirty index right.
  void MarkValidClean(uint32_t slot, uint32_t block, uint32_t crc, uint64_t epoch);
  void MarkDirty(uint32_t slot, uint32_t block, uint32_t crc, bool overwritten, uint64_t epoch);
  void MarkClean(uint32_t slot, uint32_t block);
  void Invalidate(uint32_t slot, uint32_t block);
  // Empties the slot when no block is valid any more (caller holds the
  // stripe); Commit(batch) frees it.
  void ReleaseIfEmpty(uint32_t slot, RecordBatch& batch);
  // Durable as recorded: a sync that began after the block's last write
  // has completed.
  bool IsStable(uint32_t slot, uint32_t block) const {
    return block_epoch[BlockIndex(slot, block)] < flushes_completed.load();
  }
  // Maybe durable as recorded: a sync that began after the block's last
  // write has begun (it may complete at any moment). What such a sync
  // promises must be announced before it is changed, even while the sync
  // runs (the stable-record rules in docs/design.md).
  bool MaybeStable(uint32_t slot, uint32_t block) const {
    return block_epoch[BlockIndex(slot, block)] < flushes_started.load();
  }
  uint8_t Flags(uint32_t slot, uint32_t block) const { return block_flags[BlockIndex(slot, block)]; }
  // Written back over stable clean data since the last completed sync: the
  // durable record may still call the older data clean (rule 3).
  bool OverCleanUnsynced(uint32_t slot, uint32_t block) const {
    return (Flags(slot, block) & kOverClean) && !IsStable(slot, block);
  }
  Status PutRecord(uint32_t slot, bool sync);
  void CountCacheError(std::atomic<uint64_t>& counter);

  // ---- I/O (engine_io.cc)
  struct Tally {
    uint64_t hits = 0, misses = 0;
  };
  Status ReadSegment(const Segment& seg, uint8_t* out, bool bypass, Tally& tally);
  Status WriteSegment(const Segment& seg, const uint8_t* in, bool bypass, Tally& tally);
  // ---- requests over several lines as batches (engine_batch.cc)
  // Whole blocks, memory fit for direct I/O, more than one line.
  bool Batchable(uint64_t offset, const void* buffer, uint64_t length) const;
  // A read over several lines: cached runs in one batch of cache reads,
  // missing runs in one of origin reads, then promoted in one batch. False,
  // with nothing counted or changed, when it does not apply or a cached
  // block cannot be read or proven: the caller then reads line by line,
  // which repairs and reports. Otherwise `result` is the read's outcome.
  bool ReadBatch(uint64_t offset, uint8_t* out, uint64_t length, bool bypass, Tally& tally,
                 Status& result);
  // A write-back write over several lines: data in one batch of cache
  // writes, then the records in one metadata batch. False when it does not
  // apply (the caller writes line by line); otherwise `result` is the
  // request's outcome.
  bool WriteBackBatch(uint64_t offset, const uint8_t* in, uint64_t length, bool bypass,
                      Tally& tally, Status& result);
  void HoldLines(uint64_t offset, uint64_t length, LineBatch& batch);
  void ReleaseLines(const LineBatch& batch);
  // Counts the batch's cached and missing blocks into `tally` and tells the
  // policy of a hit on each cached line. Returns the cached blocks.
  uint64_t NoteHits(const LineBatch& batch, Tally& tally);
  std::optional<uint32_t> AllocateInBatch(LineBatch& batch, size_t segment);
  void PromoteBatch(const uint8_t* data, LineBatch& batch);
  bool FlushBeforeAnnouncing(const LineBatch& batch);
  // The cache device failed a write-back write: the data goes to the
  // origin, durably, and the blocks leave the cache.
  Status CacheWriteFailed(const Segment& seg, uint32_t slot, const uint8_t* data);
  Status DiscardSegment(const Segment& seg);
  Status WriteBackSegment(const Segment& seg, std::optional<uint32_t> slot, uint8_t* window);
  Status ThroughSegment(const Segment& seg, std::optional<uint32_t> slot, uint8_t* window,
                        CacheMode mode, bool allocate);
  // Writes blocks [b0,b1) of `window` into the slot as clean, current data.
  void UpdateCachedBlocks(uint32_t slot, uint32_t b0, uint32_t b1, const uint8_t* window,
                          bool only_valid);
  // Reads blocks [b0,b1) of a cached line into `window` and verifies each;
  // a clean block that fails comes from the origin (and is repaired).
  Status ReadCachedBlocks(uint64_t line, uint32_t slot, uint32_t b0, uint32_t b1, uint8_t* window);
  // Fills the partial edge blocks of `seg` in `window` from cache or origin.
  Status FillEdges(const Segment& seg, std::optional<uint32_t> slot, uint8_t* window);
  Status SyncAll();
  // SyncAll's first step, also taken alone (before the cleaner writes
  // blocks over clean data, before an announcement that promises data):
  // the dirty-region map's changed pages, then the cache device's flush
  // (errors counted). Blocks do not become stable by it.
  Status FlushCacheSide();
  // Syncs the store; evictions listed before it are durable afterwards.
  Status SyncMetadata();
  // Before the origin copy of a line changes: syncs the store when one of
  // `lines` was evicted since the last sync (its old record may still say
  // clean on disk). Every writer of the origin calls it (rule 2).
  Status SyncIfRecentlyEvicted(uint64_t line) { return SyncIfRecentlyEvicted({&line, 1}); }
  Status SyncIfRecentlyEvicted(std::span<const uint64_t> lines);
  // Records on the cache device that the store is durable up to `sequence`
  // (no flush: the next cache flush carries it). Only ever moves forward.
  void WriteSyncMark(uint64_t sequence);
  Status AnnounceOverwrite(uint32_t slot, uint32_t b0, uint32_t b1, bool origin_write);
  // A dirty block in [b0, b1) that a running sync promises but whose data
  // may not be on the cache device durably yet: flush before announcing.
  bool PromisedButUnflushed(uint32_t slot, uint32_t b0, uint32_t b1) const;
  // Whether a sync began after `decided` (flushes_started read before a
  // write-back write decided what to announce). Such a sync promises the
  // older data of the blocks the write replaces unannounced (MarkOverwrite
  // saw no sync begun since their write), and it may flush the cache before
  // the new data is written yet sync the store after the new record is put:
  // that record, a fresh one, would be durable over data that is not, and
  // recovery would drop the block, the promised older data with it. So
  // then the writer flushes its data before it puts the record.
  bool SyncBeganSince(uint64_t decided) const { return flushes_started.load() != decided; }
  // AnnounceOverwrite's state change alone: true when the slot's record
  // must be synced before the write (the caller syncs, maybe with others).
  bool MarkOverwrite(uint32_t slot, uint32_t b0, uint32_t b1, bool origin_write);
  // Writes the dirty-region map's changed pages (every page with kAll);
  // with `flush`, flushes the cache device too. SyncAll writes them without
  // a flush of their own: its cache flush carries them.
  enum class MapWrite { kChanged, kAll };
  Status PersistDirtyMap(MapWrite what, bool flush = true);

  // ---- cleaning (engine_cleaner.cc)
  // Writes the dirty blocks of `slots` (their stripes held by the caller)
  // to the origin, makes that durable, then marks them clean, durably.
  Status CleanSlots(const std::vector<uint32_t>& slots);
  // Its steps, which CleanLines runs with the stripes released for the
  // middle one.
  void ReadDirty(const std::vector<uint32_t>& slots, CleanJob& job);
  Status WriteClean(CleanJob& job);
  Status SyncBeforeCleaning(CleanJob& job);
  Status MarkCleaned(const CleanJob& job, const std::function<bool(uint64_t)>& stripe_held);
  // Returns once no line in [first_line, last_line] is being cleaned: an
  // origin write to such a line must not race the cleaner's older copy.
  void WaitWhileCleaning(uint64_t first_line, uint64_t last_line);
  // One pass over up to `max_lines` dirty lines in origin order. Returns
  // how many lines it cleaned.
  Result<uint64_t> CleanPass(uint64_t max_lines);
  // Cleans those of `lines` that are dirty; lines whose stripe is busy (or
  // all of them, after an error) are appended to `busy` when given.
  Result<uint64_t> CleanLines(const std::vector<uint64_t>& lines, std::vector<uint64_t>* busy);
  Status FlushAll(const FlushProgress& progress);
  void CleanerLoop();
  void StartCleaner();
  void StopCleaner();

  // ---- recovery (engine_recovery.cc)
  // Fills the slot table from the store (reads only). Slots whose records
  // no longer say what RAM does are listed in `changed_slots`.
  Status LoadLines(bool clean_shutdown, std::vector<uint32_t>* changed_slots);
  // Sets the state of a block whose record is not stable (a fresh class)
  // from the checksum of what the cache holds (nothing: it cannot be read).
  void RecoverBlock(uint32_t slot, uint32_t block, BlockClass cls, bool clean_shutdown,
                    std::optional<uint32_t> found_crc);
  Status RewriteRecords(const std::vector<uint32_t>& slots);
  Status WriteSuperblock(bool clean_shutdown);

  // ---- pinning and scheduled placement (engine_placement.cc, engine_mover.cc)
  // Pinned lines stay out of the eviction policy (so never victims); a line
  // enters the policy when it is allocated or unpinned, unless pinned.
  void LoadPlacement();  // pins, window, rate, heat, movement from the store
  // A new cache: no pins, placement off, no history (the store may have
  // held another cache's).
  static Status ResetPlacement(MetadataStore* store);
  void SavePlacementHistory(bool sync);  // heat and movement
  // Pin and Unpin: checks the byte range, lets `edit` change a copy of the
  // pins for its lines [first, end) (it may refuse), saves the copy, puts it
  // in force and moves the cached lines of the intervals `edit` returns out
  // of the policy (pinning) or back into it.
  using PinEdit = std::function<Result<std::vector<LineIntervals::Interval>>(
      LineIntervals& next, uint64_t first, uint64_t end)>;
  Status ChangePins(uint64_t offset, uint64_t length, const PinEdit& edit, bool pinning);
  // Runs fn(slot, line) for each cached line in [first, end) (under mu).
  template <typename Fn>
  void ForEachCachedLine(uint64_t first, uint64_t end, Fn fn);
  uint64_t CachedLines(uint64_t first, uint64_t end);
  // Bytes [first, end) lines cover on the origin (the last may be short).
  uint64_t LinesBytes(uint64_t first, uint64_t end) const;
  MovementTotals MovementNow() const;
  void StartMover();
  void StopMover();
  void MoverLoop();
  // Brings every block of `line` into the cache, reading what is missing
  // from the origin. Returns the bytes read (0: nothing missing, or it
  // could not: no slot, an I/O error, pass-through).
  uint64_t FillLine(uint64_t line, uint8_t* buffer);
  // One tick of the mover's work within `budget` bytes; returns bytes moved.
  uint64_t FillPins(MoverState& state, uint64_t budget);
  uint64_t PlaceByHeat(MoverState& state, uint64_t budget);
  void RankRegions(MoverState& state);
  // Evicts one clean (cleaned if need be) cached line outside the hot
  // regions, for a promotion. False when there is none.
  bool DemoteColdLine(MoverState& state);
  // Inside the window: cleans dirty lines (all of them, over time) within
  // `budget` bytes, unless the background cleaner is off. Returns bytes.
  uint64_t CleanInWindow(uint64_t budget);
  bool InPlacementWindow(int64_t now) const;

  EngineDevices dev;
  EngineConfig config;
  CacheIdentity identity;
  uint32_t line_size;
  uint32_t blocks_per_line;
  uint32_t capacity;

  // Slot table.
  std::vector<uint64_t> slot_line;
  std::vector<uint16_t> slot_valid_blocks;
  std::vector<uint16_t> slot_dirty_blocks;
  std::vector<uint32_t> block_crc;
  std::vector<uint64_t> block_epoch;  // flushes_started when last written
  std::vector<uint8_t> block_flags;

  std::mutex mu;
  std::unordered_map<uint64_t, uint32_t> map;
  std::vector<uint32_t> free_slots;
  std::unique_ptr<EvictionPolicy> policy;
  std::map<uint64_t, uint32_t> dirty_index;  // origin line -> slot, for sorted cleaning
  // Lines evicted since the last metadata sync, with the order they were
  // listed in: their old records may still be the durable ones (see
  // SyncIfRecentlyEvicted). A sync removes only what was listed before it
  // began.
  std::unordered_map<uint64_t, uint64_t> unsynced_evictions;
  uint64_t evictions_listed = 0;
  uint64_t clean_cursor = 0;
  // Lines whose dirty blocks are on their way to the origin with their
  // stripes released (CleanLines); under mu. Never evicted meanwhile.
  std::unordered_set<uint64_t> cleaning;
  std::atomic<size_t> cleaning_count{0};  // cleaning.size(), read without mu
  std::condition_variable cleaning_done;
  DirtyMap dirty_map;      // under mu
  std::mutex dirty_map_io;  // one map write at a time
  std::atomic<uint64_t> sync_mark_written{0};

  std::array<std::mutex, kStripes> stripes;

  // Flush epochs: a write that completes while flushes_started == e is
  // covered by flush e+1; it is durable once flushes_completed > e.
  std::atomic<uint64_t> flushes_started{1};
  std::atomic<uint64_t> flushes_completed{1};

  std::atomic<CacheMode> mode;
  // Cleaner settings, changeable while running (Engine::SetCleaner).
  std::atomic<uint32_t> dirty_high_pct, dirty_low_pct, cleaner_batch_lines;
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> cache_errors{0};
  LiveStats stats;
  Admission admission;

  std::mutex manage_mu;  // one Flush / SetMode / Shutdown at a time
  std::mutex cleaner_mu;
  std::condition_variable cleaner_cv;
  bool cleaner_stop = false;
  std::thread cleaner;
  std::atomic<bool> shut_down{false};

  // Pinning and placement.
  LineIntervals pins;  // under mu
  uint64_t pin_limit_lines;
  std::mutex pin_mu;                      // one Pin / Unpin at a time
  std::atomic<bool> pins_changed{false};  // the filler starts over
  HeatMap heat;
  mutable std::mutex placement_mu;  // placement settings and movement
  PlacementSettings placement;
  MovementLog movement;
  std::atomic<uint64_t> pin_fills{0}, placement_promotions{0}, placement_demotions{0};
  std::mutex mover_mu;
  std::condition_variable mover_cv;
  bool mover_stop = false;
  std::thread mover;
};

template <typename Fn>
void Engine::Impl::ForEachCachedLine(uint64_t first, uint64_t end, Fn fn) {
  if (end - first <= map.size()) {
    for (uint64_t line = first; line < end; ++line) {
      if (auto it = map.find(line); it != map.end()) fn(it->second, line);
    }
    return;
  }
  for (const auto& [line, slot] : map) {
    if (line >= first && line < end) fn(slot, line);
  }
}

// Runs fn(segment, byte offset in the request) for each line the range touches.
template <typename Fn>
Status ForEachSegment(uint64_t offset, uint64_t length, uint32_t line_size, Fn fn) {
  uint64_t done = 0;
  while (done < length) {
    uint64_t pos = offset + done;
    uint32_t begin = static_cast<uint32_t>(pos % line_size);
    uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(length - done, line_size - begin));
    Segment seg{pos / line_size, begin, begin + n};
    CACHECORE_RETURN_IF_ERROR(fn(seg, done));
    done += n;
  }
  return Status::Ok();
}

}  // namespace cachecore
