// Engine internals shared by engine*.cc. Not a public header.
//
// Locking, from outside in:
// - stripes[i]: a "cell" for every origin line hashing to i, held across the
//   I/O of one line segment (like dm's bio prison). A thread blocks on a
//   stripe only while it holds no other stripe; it may try_lock more.
// - the slot table's mutex (engine/slot_table.h): what is shared between
//   lines. Never held across I/O, never blocked on while holding it.
// Per-block state of a slot is guarded by the stripe of the line in it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "policy/admission.h"
#include "engine/origin_meter.h"
#include "engine/ram_tier.h"
#include "engine/slot_table.h"
#include "engine/volume_set.h"
#include "engine/writeback_controller.h"
#include "cachecore/engine/engine.h"
#include "cachecore/metadata/volume_table.h"
#include "placement/heat_map.h"
#include "placement/line_intervals.h"
#include "placement/movement_log.h"
#include "base/stripe_lock.h"
#include "base/thread_annotations.h"

namespace cachecore {

constexpr uint32_t kBlockSize = 4096;
// Enough stripes that requests on unrelated lines rarely share one (a
// 64 KiB request over 4 KiB lines holds 16): 4 bytes each.
constexpr size_t kStripes = 65536;

// One line's share of a request: origin line, byte range within the line.
struct Segment {
  uint64_t line;
  uint32_t begin;  // byte offset in the line
  uint32_t end;    // exclusive
  uint32_t first_block() const { return begin / kBlockSize; }
  uint32_t end_block() const { return (end + kBlockSize - 1) / kBlockSize; }
  bool block_aligned() const { return begin % kBlockSize == 0 && end % kBlockSize == 0; }
};

struct CleanJob;   // engine_cleaner.cc
struct MoverState;  // engine_mover.cc
class AsyncWorkers;  // engine_async.h
struct AsyncState;   // engine_async.h
struct AsyncHit;     // engine_async.h
struct AsyncWrite;   // engine_async.h
struct AsyncMiss;    // engine_async.h
struct AsyncEdges;   // engine_async.h
struct ReactorEvictions;  // engine_async.h
struct ParkedRequest;     // engine_async.h
struct AsyncThrough;      // engine_async.h
struct AsyncTrim;         // engine_async.h
struct SplitRequest;      // engine_async.h
struct AsyncJob;          // engine_async.h
struct DelayedRequest;    // engine_async.h

// A synchronous client request, counted in flight while it lives.
class RequestInFlight {
 public:
  explicit RequestInFlight(LiveStats& stats) : stats_(stats) { stats_.Taken(); }
  ~RequestInFlight() { stats_.Answered(); }
  RequestInFlight(const RequestInFlight&) = delete;
  RequestInFlight& operator=(const RequestInFlight&) = delete;

 private:
  LiveStats& stats_;
};

struct Engine::Impl {
  // A volume of the table and its origin, as Create and Open found them.
  struct PlacedVolume {
    VolumeRecord record;
    BlockDevice* origin;
  };
  Impl(const EngineDevices& devices, const EngineConfig& config, const CacheIdentity& identity,
       const std::vector<PlacedVolume>& placed);
  ~Impl();

  // ---- geometry
  uint64_t SlotOffset(uint32_t slot, uint32_t block) const {
    return kDataOffset + static_cast<uint64_t>(slot) * line_size + uint64_t{block} * kBlockSize;
  }
  // The check a cached block's record holds (crypto/cache_key.h): its
  // CRC32C, sealed when the cache is encrypted.
  uint32_t CheckOf(const uint8_t* block_data, uint32_t slot, uint32_t block) const {
    return BlockCheck(config.key.get(), block_data, SlotOffset(slot, block));
  }
  uint64_t OriginOffset(uint64_t line, uint32_t block) const {
    return line * line_size + uint64_t{block} * kBlockSize;
  }
  // The lines of the line space in use (the last volume's end).
  uint64_t OriginLines() const { return (volumes.size_bytes() + line_size - 1) / line_size; }
  StripeLock& StripeOf(uint64_t line) { return stripes[StripeIndex(line)]; }
  static size_t StripeIndex(uint64_t line) { return (line * 0x9E3779B97F4A7C15ull >> 32) % kStripes; }
  CacheMode EffectiveMode() const {
    return failed.load() ? CacheMode::kPassThrough : mode.load();
  }

  // ---- slots (engine_lines.cc; the state is the slot table's)
  // A slot for the mover's fill of `line`: a free one, or a clean victim's
  // (SlotTable::Allocate); the caller holds the stripes `held` (sorted: a
  // victim in them needs no lock), and the lines of `keep` are never
  // victims. Nothing when neither is at hand.
  std::optional<uint32_t> TakeSlot(uint64_t line, std::span<const size_t> held,
                                   std::span<const Segment> keep);
  // Applies `batch` to the store (synced with `sync`), then frees the slots
  // it emptied. Counts a failure.
  Status Commit(RecordBatch& batch, bool sync);
  // Puts the slot's record as RAM has it (synced with `sync`; `settles` as
  // SlotTable::BuildRecord's). Counts a failure.
  Status PutRecord(uint32_t slot, bool sync, bool settles);
  // Applies `batch` to the store (synced with `sync`). Counts a failure.
  Status ApplyRecords(MetadataStore::Batch& batch, bool sync);
  void CountCacheError(std::atomic<uint64_t>& counter);

  // ---- requests (engine.cc; engine_async.cc for the asynchronous ones)
  struct Tally {
    uint64_t hits = 0, misses = 0;
  };
  // Whether the request bypasses the cache as part of a sequential stream
  // past the cutoff (counted); otherwise its range is heat for placement.
  // Once per request: the stream detector sees each one.
  // `volume`'s own cutoff when it has one, the cache's otherwise.
  bool BypassAndHeat(uint64_t offset, uint64_t length, const LiveVolume& volume);
  Status SyncRequest();
  // A request's blocks as hits and misses, for the cache and for the
  // volume holding `offset`.
  void CountReads(const Tally& tally, uint64_t offset);
  // An asynchronous request's answer: counted out of flight, then `done`.
  void Answer(EngineCompletion* done, Status status) {
    stats.Answered();
    done->Done(std::move(status));
  }
  void CountWrites(const Tally& tally, uint64_t offset);
  // The lines of [offset, offset+length) in `segments` (cleared first).
  void SplitIntoSegments(uint64_t offset, uint64_t length, std::vector<Segment>& segments) const;
  // Takes the stripes of `segments` without waiting, listing them in `held`
  // (sorted): shared (hits on one line run side by side) or exclusive (a
  // request that changes its lines). False, holding none, when one is
  // busy: `busy` says which.
  bool TryHoldStripes(std::span<const Segment> segments, std::vector<size_t>& held,
                      bool exclusive, size_t& busy);
  void ReleaseStripes(std::span<const size_t> held, bool exclusive);
  // A read that hits in full, served on the calling reactor (engine_async.cc).
  // False, with nothing done, when it does not apply.
  bool TryReadHitAsync(uint64_t offset, uint8_t* out, uint64_t length, bool bypass,
                       EngineCompletion* done, size_t& busy);
  // Its steps: the lines' stripes, shared; whether every block is cached;
  // the cache reads; once they land, the checksums, the stripes let go, and
  // the completion (or the miss path again, when a block is not proven).
  bool AllBlocksCached(AsyncHit& hit);
  void PlanHitReads(AsyncHit& hit);
  void FinishReadHit(AsyncHit& hit);
  // The RAM tier's share (engine_ram.cc), its stripes held. Whether the
  // tier holds every block of the hit: copied out, counted and answered.
  // Otherwise the segments it holds are copied, and the rest is for the
  // cache to read (or the miss path, when the cache lacks some).
  bool ServedFromRam(AsyncHit& hit);
  bool AnswerFromRam(AsyncHit& hit);
  void MarkReadFromCache(AsyncHit& hit);
  // A hit the cache proved: its blocks go into the tier. A miss: those of
  // its blocks it read from the cache, proven.
  void FillRam(const AsyncHit& hit);
  void FillRam(const AsyncMiss& miss);
  // Before a request changes its lines (their stripes held exclusively):
  // the tier forgets every block it touches, even in part.
  void ForgetInRam(std::span<const Segment> segments);
  // Whether a cached block read into `data` is what its slot vouches for
  // (`unread`: its read failed).
  bool CachedBlockProven(uint32_t slot, uint32_t block, const uint8_t* data, bool unread) const;
  // A dirty block (only the cache holds it) that could not be read
  // (`unread`) or fails its checksum (counted): the read fails with this
  // rather than return something wrong.
  Status DirtyBlockLost(uint64_t line, uint32_t block, bool unread);
  // What a reactor read's I/O proved, every failed read counted (the cache's
  // towards its error threshold): kProven; kFailed with the answer (an
  // origin read failed, or a dirty block, which only the cache holds, could
  // not be read or fails its checksum: not retried); or
  // kRepair, a clean block not proven (the miss path reads it from the
  // origin and writes it back). `on_origin` per read, `cached` per block: nullptr
  // when every read and block is the cache's.
  struct ReadProof {
    enum Kind { kProven, kRepair, kFailed } kind = kProven;
    Status status;
  };
  ReadProof ProveReads(std::span<const AsyncIo> ios, const std::vector<uint8_t>* on_origin,
                       std::span<const Segment> segments, std::span<const uint32_t> slots_of,
                       const std::vector<uint8_t>* cached, const uint8_t* out);
  // A write-back write of whole blocks, served on the
  // calling reactor (engine_async_write.cc) when nothing in it would block.
  // False, with nothing done or counted, when it does not apply.
  // `held`: the lines' stripes, already held exclusively by the caller
  // (AsyncEdges); taken over when this returns true, still the caller's
  // when false.
  // `dirty_lines`: every line of it holds dirty data in the blocks it
  // writes, which go to the cache whatever the mode (dirty blocks are only
  // on the cache).
  bool TryWriteBackAsync(uint64_t offset, const uint8_t* in, uint64_t length, bool fua,
                         bool bypass, EngineCompletion* done, size_t& busy,
                         const std::vector<size_t>* held = nullptr, bool dirty_lines = false);
  // Its steps: whether each line may be written without an announcement;
  // the cache writes; once they land, the records (on the continuation
  // thread when a write failed), the epoch and stripes let go, and the
  // answer (after a group commit for FUA).
  bool WritableWithoutAnnouncing(const AsyncWrite& write) const;
  enum class Placement { kPlaced, kNoSpace, kNotAdmitted, kByLine, kElsewhere };
  Placement PlaceLines(AsyncWrite& write);
  // Whether the cache holds at least `lines` free or clean lines (a hint:
  // the clean ones may be busy or hot).
  bool RoomFor(size_t lines);
  // Whether a write over dirty data a sync may promise must announce, and
  // whether the cache side must be flushed first (AnnounceOverwrite's
  // steps, which the committer then runs: MarkAnnouncements).
  bool PlanAnnouncements(AsyncWrite& write);
  void MarkAnnouncements(AsyncWrite& write, MetadataStore::Batch& batch);
  void PlanWrites(AsyncWrite& write);
  void SubmitWriteBack(AsyncWrite& write);
  void WriteBackAgain(AsyncWrite& write, bool by_line);
  void WriteBackLanded(AsyncWrite& write);

  void FinishWriteBack(AsyncWrite& write);
  // Lets go of the write's epoch and stripes and gives it back to its
  // pool; returns its answer, which Send gives (for FUA, once a group
  // commit covered it). Apart, so that a caller releasing several writes
  // answers none while another still holds its lines.
  struct PendingAnswer {
    EngineCompletion* done;
    Status status;
    bool fua;  // answered once a group commit covered it
  };
  PendingAnswer ReleaseWrite(AsyncWrite& write, Status result);
  // The committer's answer for a write: announced (back to its reactor for
  // the data, no answer yet), recorded, or failed.
  PendingAnswer WriteBackCommitted(AsyncWrite& write, const Status& put);
  void Send(PendingAnswer answer);
  // A read that misses, served on the calling reactor
  // (engine_async_miss.cc) when the origin's requests do not wait there
  // and its promotion needs no eviction. False, with nothing done or
  // counted, when it does not apply.
  bool TryReadMissAsync(uint64_t offset, uint8_t* out, uint64_t length, bool bypass,
                        EngineCompletion* done, size_t& busy);
  // A write in another mode than write-back (or bypassing it), served on
  // the calling reactor (engine_async_through.cc) when the origin's
  // requests do not wait there and no line holds dirty data or is being
  // cleaned. False, with nothing done or counted, when it does not apply.
  // `exact`: the whole blocks hold bytes not known (a partial block whose
  // origin read failed): the origin takes only the caller's bytes, and the
  // unknown blocks are dropped from the cache, never written there.
  struct ExactOriginWrite {
    uint64_t offset, length;
    const uint8_t* in;                       // aligned for direct I/O
    std::span<const uint64_t> unknown_blocks;  // volume offsets
  };
  bool TryWriteThroughAsync(uint64_t offset, const uint8_t* in, uint64_t length, bool fua,
                            bool bypass, EngineCompletion* done, size_t& busy,
                            const std::vector<size_t>* held = nullptr,  // as TryWriteBackAsync's
                            const ExactOriginWrite* exact = nullptr);
  // Its steps: the announcements (put and synced by the committer when
  // needed), the origin write, the copies' writes (lines not cached take a
  // slot first, in write-through), the records, the answer.
  void NoteThroughHits(AsyncThrough& t);
  void AnnounceThrough(AsyncThrough& t);
  void WriteThroughOrigin(AsyncThrough& t);
  void ThroughLanded(AsyncThrough& t);
  void WriteThroughCopies(AsyncThrough& t);
  void CopiesLanded(AsyncThrough& t);
  void AddThroughRecords(AsyncThrough& t, MetadataStore::Batch& batch);
  PendingAnswer ThroughCommitted(AsyncThrough& t, const Status& put);
  // A trim of at most kMaxOnReactor bytes, served on the calling reactor
  // (engine_async_trim.cc) unless a line of it is being cleaned. False,
  // with nothing done, when it does not apply.
  bool TryTrimAsync(uint64_t offset, uint64_t length, EngineCompletion* done, size_t& busy);
  // Its steps: the blocks dropped; the records put (and synced when they
  // must be) by the committer; the origin's discard; the answer.
  void DropTrimmedBlocks(AsyncTrim& t);
  void AddTrimRecords(AsyncTrim& t, MetadataStore::Batch& batch);
  PendingAnswer TrimCommitted(AsyncTrim& t, const Status& put);
  void DiscardTrimmedOrigin(AsyncTrim& t);
  void TrimDiscarded(AsyncTrim& t);
  void FinishTrim(AsyncTrim& t, Status result);
  // A read, write or trim taken on a reactor: served there when it can
  // be, parked on a busy stripe until its holder lets go (or on a line
  // being cleaned until the cleaning ends) and then tried again (`parked`:
  // the request, when this is that retry).
  void RunOnReactor(AsyncJob job, ParkedRequest* parked);
  // A request every path refused with nothing to wait for: answered when
  // the store failed, otherwise started over a little later (a mode switch
  // between two paths' looks), a bounded number of times.
  void NotServedOnReactor(const AsyncJob& job);
  void ParkWhileCleaning(ParkedRequest& parked);
  // A request made off any reactor: on the engine's own.
  void RunOffReactor(const AsyncJob& job);
  // A request held back (throttled, or for a stripe), on its reactor once
  // its delay passed; RunLater holds one back.
  void RunLater(const AsyncJob& job, std::chrono::microseconds delay);
  void RunDelayed(DelayedRequest& held);
  // A request as parts on the calling reactor, cut at multiples of `cut`
  // bytes of the volume (kMaxOnReactor for a request over it; line_size for
  // a write whose lines go each their own way).
  void SplitOnReactor(const AsyncJob& job, uint64_t cut);
  void PartDone(SplitRequest& split, Status status);
  bool TryOnReactor(const AsyncJob& job, size_t& busy);
  // A read or write of whole blocks in memory fit for direct I/O (`held`:
  // as TryWriteBackAsync's, for a write).
  bool TryWholeBlocksOnReactor(const AsyncJob& job, size_t& busy,
                               const std::vector<size_t>* held = nullptr);
  // A read or write not in whole blocks, or in memory unfit for direct
  // I/O, served on the calling reactor through a buffer of its own
  // (engine_async_edges.cc). False, with nothing done, when it does not
  // apply (`busy`: a stripe to park on).
  bool TryEdgesAsync(const AsyncJob& job, size_t& busy);
  // Its steps, for a write with partial blocks: the stripes held, the
  // partial blocks' other bytes read; once they land (back on the
  // reactor), proven, the caller's bytes copied in, and the whole blocks
  // written with the stripes handed over; the answer copied out.
  void PlanEdgeReads(AsyncEdges& edges);
  void WriteWithEdges(AsyncEdges& edges);
  ReadProof ProveEdges(const AsyncEdges& edges);
  bool RereadEdgesFromOrigin(AsyncEdges& edges);
  bool NoteUnreadEdges(AsyncEdges& edges);
  void WriteWithUnreadEdges(AsyncEdges& edges);
  void FailEdges(AsyncEdges& edges, Status failed);
  bool EdgeWriteCoversDirtyData(const AsyncEdges& edges);
  void EdgesElsewhere(AsyncEdges& edges, bool by_line);
  void EdgesAnswered(AsyncEdges& edges, Status status);
  // Its steps: the reads (cached runs from the cache, missing runs from the
  // origin); once they land, the proof of the cached blocks (a clean one
  // not proven repaired from the origin), the promotion's cache writes; once those
  // land, the blocks marked, and the records put by the committer, which
  // then calls FinishMiss: the stripes let go, the answer.
  void PlanMissReads(AsyncMiss& miss);
  void SubmitMissIos(AsyncMiss& miss);
  void MissLanded(AsyncMiss& miss);
  // Clean blocks not proven, read again from the origin; once they land,
  // dropped from the cache (promoted afresh with the rest).
  // False when there is nothing to repair.
  bool StartRepair(AsyncMiss& miss);
  ReadProof RepairLanded(AsyncMiss& miss);
  void FailMiss(AsyncMiss& miss, Status status);
  bool PlanPromotion(AsyncMiss& miss);
  void PromotionLanded(AsyncMiss& miss);
  PendingAnswer FinishMiss(AsyncMiss& miss);
  // A slot for `line` on a reactor (engine_lines.cc; REQUIRES: its stripe,
  // held with the others in `held`): a free one, or a clean victim's, never
  // one of `keep`'s lines, its stripe claimed without waiting and added to
  // `evictions`, which the request keeps until EndEvictions. Nothing when
  // neither is at hand.
  std::optional<uint32_t> TakeSlotOnReactor(uint64_t line, std::span<const size_t> held,
                                            std::span<const Segment> keep,
                                            ReactorEvictions& evictions);
  // The records of `touched` slots (kNoSlot entries skipped) that still hold
  // a valid block, then the deletes of the slots `emptied` left empty: what
  // a reactor request puts once its blocks have landed (after its victims'
  // deletes). `settle` as SlotTable::BuildRecord's `settles`.
  void AddLineRecords(std::span<const uint32_t> touched, const RecordBatch& emptied,
                      MetadataStore::Batch& batch, bool settle);
  // Once the victims' deletes are in the store: lists the evictions, lets
  // their stripes go, and empties `evictions`.
  void EndEvictions(ReactorEvictions& evictions);
  // The engine's asynchronous state (engine_async.cc), started on first use.
  AsyncState& Async();
  // Queues a sync of the store when `due` (too many evictions wait for
  // one) and none is queued yet.
  void QueueMetadataSyncIf(bool due);
  // Waits until the engine's own reactor and its helper threads have
  // nothing queued or running (if started).
  void DrainWorkers();
  // Runs what is queued and joins the asynchronous threads (if started),
  // while `async` still points to their state (what runs meanwhile uses it).
  void StopAsync();

  // ---- a block's life in the cache (engine_blocks.cc)
  // The cache device failed a write-back write of flush epoch `epoch`: the
  // data goes to the origin, durably, and the blocks leave the cache.
  // `count`: the failed write is counted here (once per write, which may
  // have covered several segments).
  Status CacheWriteFailed(const Segment& seg, uint32_t slot, const uint8_t* data, uint64_t epoch,
                          bool count);
  // A write-back write's blocks of `seg` landed in the slot from `data` in
  // flush epoch `epoch`: marks them dirty (its stripe held).
  void MarkSegmentDirty(const Segment& seg, uint32_t slot, const uint8_t* data, uint64_t epoch);
  // A promotion's cache write landed (or failed: counted): marks its blocks
  // valid and clean in flush epoch `epoch` (their stripes held).
  void MarkPromoted(const IoRequest& write, uint64_t epoch);
  Status SyncAll();
  // SyncAll for clients (flushes and FUA writes), as a group commit: a
  // caller that arrives while one runs waits for the next, which then runs
  // once for every caller that arrived meanwhile. Returns once a SyncAll
  // that began after the call has ended, with the status of the sync that
  // covered it (not a later one's: a later success proves nothing of an
  // earlier failed flush).
  Status GroupSync();
  // The same for an asynchronous request: returns at once; `done` is
  // answered (Answer) by the thread that ran the sync that covered it.
  void GroupSyncAsync(EngineCompletion* done);
  // The sync thread's turn to run a sync for asynchronous waiters (none may be
  // left by then, or a sync may be running: then nothing).
  void LeadQueuedSync();
  struct SyncWaiter {  // a caller waiting for the next sync
    uint64_t ticket = 0;
    bool done = false;
    Status status;
    // An asynchronous caller's completion (its waiter comes from a pool);
    // nullptr: a synchronous caller, on its stack, woken by `ended`.
    EngineCompletion* answer = nullptr;
  };
  struct SyncGroup {
    Mutex mu;
    std::condition_variable ended;
    uint64_t asked GUARDED_BY(mu) = 0;  // tickets handed out
    bool running GUARDED_BY(mu) = false;
    bool lead_queued GUARDED_BY(mu) = false;  // the sync thread will run a sync for asynchronous waiters
    std::vector<SyncWaiter*> waiting GUARDED_BY(mu);
  } sync_group;
  // A sync round, run by a synchronous caller or the sync thread for the
  // asynchronous ones. Begin: the round covers every ticket asked so far
  // (returned). Run (the lock released): SyncAll, then End and the answers.
  // End, with its status: settles the waiters it covers (the asynchronous
  // ones are appended to `answered`), wakes the synchronous ones, and
  // returns whether the sync thread must run the next round (only asynchronous
  // waiters are left). Then, without the lock, the answers.
  uint64_t BeginSyncRound() REQUIRES(sync_group.mu);
  Status RunSyncRound(uint64_t covers) EXCLUDES(sync_group.mu);
  bool EndSyncRound(uint64_t covers, const Status& s, std::vector<SyncWaiter*>& answered)
      REQUIRES(sync_group.mu);
  void AnswerSyncWaiters(std::vector<SyncWaiter*>& answered, bool hand_on) EXCLUDES(sync_group.mu);
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
  // Before blocks are rewritten in place (or their origin copy written) in
  // flush epoch `epoch`: announces what a sync may promise of them (see
  // below and SlotTable::MarkOverwrite).
  Status AnnounceOverwrite(uint32_t slot, uint32_t b0, uint32_t b1, bool origin_write,
                           uint64_t epoch);
  // Writes the dirty-region map's changed pages (every page with kAll);
  // with `flush`, flushes the cache device too. SyncAll writes them without
  // a flush of their own: its cache flush carries them.
  enum class MapWrite { kChanged, kAll };
  Status PersistDirtyMap(MapWrite what, bool flush = true);

  // ---- cleaning (engine_cleaner.cc)
  // The steps of cleaning, which CleanLines runs with the stripes released
  // for the middle one.
  void ReadDirty(const std::vector<uint32_t>& dirty_slots, CleanJob& job);
  Status WriteClean(CleanJob& job);
  Status SyncBeforeCleaning(CleanJob& job);
  Status MarkCleaned(const CleanJob& job, const std::function<bool(uint64_t)>& stripe_held);
  // One pass over up to `max_lines` dirty lines in origin order. Returns
  // how many lines it cleaned.
  Result<uint64_t> CleanPass(uint64_t max_lines);
  // Cleans those of `lines` that are dirty; lines whose stripe is busy (or
  // all of them, after an error) are appended to `busy` when given.
  Result<uint64_t> CleanLines(const std::vector<uint64_t>& lines, std::vector<uint64_t>* busy);
  // Cleans the lines of [first, end) dirty now (all: the whole line space).
  Status FlushAll(const FlushProgress& progress, uint64_t first = 0, uint64_t end = kNoLine);
  // Leaving write-back (the mode already changed): waits for the write-back
  // writes that saw the old mode, then flushes until no line is dirty.
  Status CleanForModeSwitch(const FlushProgress& progress);
  void CleanerLoop();
  // One tick of the background cleaner, `seconds` after the last: the
  // controller's reading, then the passes it allows. Returns lines cleaned.
  Result<uint64_t> CleanerTick(double seconds) EXCLUDES(cleaner_tick_mu);
  WritebackController::Reading CleanerReading(double seconds) REQUIRES(cleaner_tick_mu);
  void UpdateWritebackRate() REQUIRES(cleaner_tick_mu);
  uint64_t WritebackRateNow() const;  // the writeback rate stats show
  void StartCleaner();
  void StopCleaner();
  // How long a write-back write waits before it runs: 0 unless dirty lines
  // passed the high watermark (or clean and free ones fell under the
  // reserve), then more the fuller the cache, up to kMaxThrottle.
  std::chrono::microseconds ThrottleDelay() const;
  // A write's wait, counted in throttled_writes when there is one; none
  // for a write that adds no dirty line (one that bypasses the cache, or
  // one over lines all dirty already: slowing a rewrite of dirty data
  // keeps no clean line at hand). The reactor holds the write back on a
  // timer for that long.
  std::chrono::microseconds Throttle(uint64_t offset, uint64_t length, bool bypass);

  // ---- recovery (engine_recovery.cc)
  // Fills the slot table from the store (reads only). Slots whose records
  // no longer say what RAM does are listed in `changed_slots`.
  Status LoadLines(bool clean_shutdown, std::vector<uint32_t>* changed_slots);
  Status AdoptRecords(const SlotTable::LoadFrame& frame, std::vector<UnprovenBlock>& unproven);
  // The slot table's snapshot (store_snapshot.cc): written at a clean
  // shutdown, taken by the next start when it fits (false: the records).
  std::string SnapshotTag() const;
  Status WriteSnapshot();
  Status PutUnsettledRecords();
  bool LoadSnapshot(uint64_t origin_lines);
  bool started_from_snapshot = false;
  Status RewriteRecords(const std::vector<uint32_t>& changed);
  // A cache of an older format (`from`, kOldestFormatVersion..) in this
  // build's; `changed` as LoadLines left it.
  Status UpgradeFormat(const std::vector<uint32_t>& changed, uint32_t from);
  Status WriteSuperblock(bool clean_shutdown);

  // ---- volumes (engine_volumes.cc)
  // Bases are multiples of this, a whole alignment apart: 65,536 lines.
  uint64_t VolumeAlignment() const { return uint64_t{65536} * line_size; }
  // Saves `table` in the store, synced, then makes it the table in force.
  Status SaveVolumeTable(std::vector<VolumeRecord> table) REQUIRES(volume_mu);
  // After the published volumes changed: the dirty-region map over the
  // line space now in use, then the superblock saying so, all pages of the
  // map written and flushed.
  Status PersistLineSpace();
  // RemoveVolume's steps: clean the volume's dirty lines, then drop its
  // lines from the cache (their records deleted, synced).
  Status CleanVolume(const LiveVolume& v, const FlushProgress& progress);
  // CleanVolume and DropVolumeLines until nothing of the volume is cached
  // (kBusy when it keeps taking writes).
  Status EmptyVolume(const LiveVolume& v, const std::string& name, const FlushProgress& progress)
      REQUIRES(manage_mu);
  // The volume named `name`; kNotFound. It stays while manage_mu is held.
  Result<const LiveVolume*> FindLiveVolume(const std::string& name) REQUIRES(manage_mu) EXCLUDES(volume_mu);
  Status DropVolumeLines(const LiveVolume& v);
  Status DropCachedLines(uint64_t first, uint64_t end);  // DropVolumeLines's lines, without the sync
  // One clean line out of the cache, its record's delete in `batch` (its
  // stripe taken here); kBusy for a dirty line or one being cleaned.
  Status DropLine(uint64_t line, RecordBatch& batch);
  Status FinishRemoval(const LiveVolume& v) REQUIRES(volume_mu);
  // RemoveVolume's first step: the checks, then the volume refuses
  // requests and the table says `removing` (synced).
  Result<LiveVolume*> MarkRemoving(const std::string& name) EXCLUDES(volume_mu);
  // The lines [first, end) of `v` in the line space.
  std::pair<uint64_t, uint64_t> VolumeLines(const LiveVolume& v) const {
    return {v.base / line_size, (v.base + v.size + line_size - 1) / line_size};
  }

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

  EngineDevices dev;  // dev.origin is origin_meter
  // An encrypted cache: dev.cache is this, over the device given
  // (crypto/encrypted_device.h).
  std::unique_ptr<BlockDevice> encrypted_cache;
  // The volumes' origins as one device in the line space (volume_set.h).
  VolumeSet volumes;
  BlockDevice* const raw_origin;  // the volumes themselves: the cleaner's way there
  OriginMeter origin_meter;
  // Calendar time for the heat map, the movement log and the window (after dev).
  Clock* const clock = dev.clock != nullptr ? dev.clock : SystemClock();
  EngineConfig config;
  CacheIdentity identity;
  uint32_t line_size;
  uint32_t blocks_per_line;
  uint32_t capacity;

  Mutex dirty_map_io;  // one map write at a time
  std::atomic<uint64_t> sync_mark_written{0};

  std::array<StripeLock, kStripes> stripes;

  std::atomic<CacheMode> mode;
  // Cleaner settings, changeable while running (Engine::SetCleaner).
  std::atomic<uint32_t> dirty_target_pct, dirty_high_pct, dirty_low_pct, cleaner_batch_lines;
  // One SetCleaner at a time: two at once could leave a mix of both in
  // force and saved (low above high, say), which the next Open would
  // replace with the defaults.
  Mutex cleaner_settings_mu;
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> cache_errors{0};
  LiveStats stats;
  Admission admission;
  SlotTable slots;  // after stats, which it counts into
  RamTier ram;      // filled and read under the stripes (engine/ram_tier.h)
  Mutex ram_settings_mu;  // one SetRamCache at a time

  Mutex manage_mu;  // one Flush / SetMode / Shutdown / AddVolume / RemoveVolume at a time
  Mutex volume_mu;  // after manage_mu
  std::vector<VolumeRecord> volume_table GUARDED_BY(volume_mu);
  // One flush epoch in flight at a time (SyncAll; CleanForModeSwitch's
  // beginning): a flush that completes after a later one began would make
  // BlockEpochs' sweep answer wrongly (engine/block_epochs.h).
  Mutex flush_flight_mu;
  Mutex cleaner_mu;
  std::condition_variable cleaner_cv;
  bool cleaner_stop GUARDED_BY(cleaner_mu) = false;
  std::thread cleaner;
  Mutex cleaner_tick_mu;  // one tick at a time (the cleaner's, or a test's)
  WritebackController controller GUARDED_BY(cleaner_tick_mu);
  // The origin meter's reading at the last tick, and the clients' mean
  // queue depth at the origin since (at most one), smoothed over a second.
  uint64_t origin_queue_ns_seen GUARDED_BY(cleaner_tick_mu) = 0;
  OriginMeter::Clock::time_point origin_seen_at GUARDED_BY(cleaner_tick_mu) = OriginMeter::Clock::now();
  double origin_queue_depth GUARDED_BY(cleaner_tick_mu) = 0;
  // UpdateWritebackRate's: when it last updated (steady clock, ns), and
  // cleaned_blocks then. Written under cleaner_tick_mu, read by stats too.
  std::atomic<int64_t> rate_updated_ns{std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count()};
  std::atomic<uint64_t> rate_blocks{0};
  std::atomic<bool> cleaner_ticked{false};  // a CleanerTick has run
  std::atomic<bool> shut_down{false};

  // Pinning and placement.
  uint64_t pin_limit_lines;
  Mutex pin_mu;                           // one Pin / Unpin at a time
  std::atomic<bool> pins_changed{false};  // the filler starts over
  HeatMap heat;
  mutable Mutex placement_mu;
  PlacementSettings placement GUARDED_BY(placement_mu);
  MovementLog movement GUARDED_BY(placement_mu);
  std::atomic<uint64_t> pin_fills{0}, placement_promotions{0}, placement_demotions{0};
  Mutex mover_mu;
  std::condition_variable mover_cv;
  bool mover_stop GUARDED_BY(mover_mu) = false;
  std::thread mover;

  // Asynchronous requests (engine_async.cc; deleted there, where the types
  // are whole). ~Impl stops their threads before anything else.
  struct AsyncDeleter {
    void operator()(AsyncState* state) const;
  };
  std::once_flag async_started;
  std::unique_ptr<AsyncState, AsyncDeleter> async;
};

// A request's range: kBusy once shut down, kInvalidArgument unless whole
// sectors, kOutOfRange unless within one volume that takes requests (that
// volume then in `volume`).
Status CheckRange(const Engine::Impl& impl, uint64_t offset, uint64_t length,
                  LiveVolume** volume = nullptr);
// Open: the volume table (the store's; for a cache of format 2, its
// origin as volume 0) with each volume's origin from `devices`, checked
// against what the table recorded (size, identity). kMismatch naming the
// volume whose origin is missing or wrong.
Result<std::vector<Engine::Impl::PlacedVolume>> PlaceVolumes(const EngineDevices& devices,
                                                             const CacheIdentity& identity, bool upgrade);
// After a metadata write or sync failed: the store's failure (nothing that
// changes what the cache holds is accepted then); OK otherwise.
Status RefuseIfMetadataFailed(const Engine::Impl& impl);

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
