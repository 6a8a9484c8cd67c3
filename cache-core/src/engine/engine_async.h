// The engine's asynchronous requests: what engine_async.cc (the entry
// points, parking, parts, the helper threads), engine_async_write.cc (write-back
// writes, the record committer), engine_async_miss.cc (misses),
// engine_async_through.cc (writes in the other modes),
// engine_async_trim.cc (trims) and engine_async_edges.cc (requests not in
// whole blocks) share. Not a public header.
//
// A request served on a reactor holds its lines' stripes (tried, never
// waited for: a reactor never blocks on a stripe; a request that finds one
// busy parks on it and is tried again when it is let go) from its decision
// until its state is written, across its I/O; another thread may let them
// go (a StripeLock belongs to no thread). What must wait for the store (its
// records, an announcement's sync, a cache-side flush) goes to the record
// committer and comes back; a failed cache write's rest goes to the
// continuation thread (kContinue); a write to the origin or a trim over a
// line being cleaned parks until the cleaning ends; a clean block to repair
// is read again by the miss path, which holds its lines. No request runs
// on a thread of its own.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "engine/engine_impl.h"

namespace cachecore {

// Past this a request is served in parts (whole, it would hold many
// stripes across its I/O): SplitOnReactor.
constexpr uint64_t kMaxOnReactor = 1 << 20;

constexpr size_t kNoStripe = SIZE_MAX;
// In place of a busy stripe: a line of the request is being cleaned, and
// the request must wait for the cleaner's origin write (it parks on the
// slot table until cleaning ends: SlotTable::ParkWhileCleaning).
constexpr size_t kBusyCleaning = SIZE_MAX - 1;

// Submits every one of `ios` (not empty) to `device` for `owner`, whose
// `pending` counts one more than the requests until the last is submitted:
// a device that completes inline cannot finish the request under this loop.
// `owner` may be gone when this returns.
template <typename Owner>
void SubmitAll(BlockDevice& device, Owner& owner) {
  owner.pending = owner.ios.size() + 1;
  for (AsyncIo& io : owner.ios) device.Submit(io);
  owner.IoDone(owner.ios.front());
}

// Whether the read of `block` (a pointer into a request's buffer) is one
// of `ios` that failed.
bool ReadOfBlockFailed(std::span<const AsyncIo> ios, const uint8_t* block);

struct AsyncJob {
  enum Kind {
    kRead, kWrite, kDiscard,  // a request, on a reactor
    kLeadSync,  // runs a group commit for asynchronous waiters
    kSyncMetadata,  // syncs the store (so many evictions wait for a sync)
    kContinue,  // `next` runs; it answers its request itself
  } kind;
  uint64_t offset = 0, length = 0;
  uint8_t* buffer = nullptr;
  bool fua = false, bypass = false;
  EngineCompletion* done = nullptr;
  ReactorTask* next = nullptr;
  bool throttle = false;  // a write from off a reactor: throttled where it runs
  bool not_a_hit = false;  // a read whose hit found a block to repair: by the miss path
  uint16_t refusals = 0;  // times every path refused it with nothing to wait for
};

// Threads for what must not run on a reactor, as jobs in a queue: the rest
// of a request whose cache write failed (kContinue), the group commit's
// rounds (kLeadSync), a sync that bounds unsynced evictions (kSyncMetadata).
// Never a request of its own.
class AsyncWorkers {
 public:
  // `name`: the threads' name (NameThisThread).
  AsyncWorkers(Engine::Impl& im, uint32_t threads, const char* name);
  // Runs what is queued, then joins (idempotent). A job queued once every
  // thread has left is never run.
  void Stop();
  ~AsyncWorkers() { Stop(); }
  void Run(const AsyncJob& job);
  // Returns once nothing is queued or running (Engine::Shutdown: what was
  // taken completes before the clean shutdown is recorded).
  void Drain();

 private:
  void Loop(const char* name);
  void SyncMetadataOnce();

  Engine::Impl& im_;
  Mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<AsyncJob> queue_ GUARDED_BY(mu_);
  uint32_t running_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// Request states, reused: their vectors keep their capacity, so a warm
// reactor allocates nothing per request.
template <typename T>
class RequestPool;

// Requests made off any reactor (a caller's own thread), served on a
// reactor of the engine's own
// (engine_own_reactor.cc), started on the first: as a reactor's own
// requests are, with no thread waiting per request.
class OwnReactor {
 public:
  explicit OwnReactor(Engine::Impl& im);
  ~OwnReactor();
  // Takes the request (answered on the engine's reactor); false, with
  // nothing done, when no reactor can be made (Reactor::Create's error in
  // `why`) or it is stopped.
  bool Run(const AsyncJob& job, Status& why);
  // Returns once every request it took is answered (Engine::Shutdown).
  void Drain();
  // Takes no more, waits until every request it took is answered, then
  // stops the reactor; idempotent.
  void Stop();

 private:
  struct Posted;
  bool Started(Status& why);
  void Serve(Posted& posted);
  void Answered(Posted& posted, Status status);

  Engine::Impl& im_;
  Mutex mu_;
  std::condition_variable idle_;
  uint64_t outstanding_ GUARDED_BY(mu_) = 0;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::unique_ptr<Reactor> reactor_;  // set once, under mu_
  std::thread thread_;
  std::unique_ptr<RequestPool<Posted>> pool_;
};

template <typename T>
class RequestPool {
 public:
  std::unique_ptr<T> Take() {
    MutexLock lock(mu_);
    if (spare_.empty()) return std::make_unique<T>();
    std::unique_ptr<T> one = std::move(spare_.back());
    spare_.pop_back();
    return one;
  }
  void Give(std::unique_ptr<T> one) {
    if constexpr (requires(T& t) { t.ShedLargeArrays(); }) one->ShedLargeArrays();
    MutexLock lock(mu_);
    spare_.push_back(std::move(one));
  }

 private:
  Mutex mu_;
  std::vector<std::unique_ptr<T>> spare_ GUARDED_BY(mu_);
};

// A reactor's read or write that found a stripe busy: parked on it until
// its holder lets go, then posted back to its reactor and tried again from
// the start (Engine::Impl::RunOnReactor), never a thread asleep per request.
struct ParkedRequest final : StripeWaiter, ReactorTask {
  Engine::Impl* im = nullptr;
  Reactor* reactor = nullptr;
  AsyncJob job{AsyncJob::kRead};
  void Unparked() override { reactor->Post(this); }
  void Run() override { im->RunOnReactor(job, this); }
};

// A request held back on its reactor, run once its delay has passed: a
// write-back write throttled because dirty lines passed the high watermark
// (Engine::WriteAsync), or a request whose stripe someone sleeps for.
struct DelayedRequest final : ReactorTimer {
  Engine::Impl* im = nullptr;
  AsyncJob job{AsyncJob::kWrite};
  void OnComplete(int) override { im->RunDelayed(*this); }
};

// A request over kMaxOnReactor bytes, served on its reactor as parts of at
// most that size (each a request of its own: its stripes, its records);
// answered once every part is, with the first error, after a group commit
// when it is a FUA write (its parts are not FUA).
struct SplitRequest final : EngineCompletion {
  Engine::Impl* im = nullptr;
  EngineCompletion* done = nullptr;
  bool fua = false;
  std::atomic<size_t> left{0};
  Mutex mu;
  Status first_error GUARDED_BY(mu);
  void Done(Status status) override { im->PartDone(*this, std::move(status)); }
};

// A read or write not in whole blocks, or in memory unfit for direct I/O,
// on its reactor (engine_async_edges.cc): the whole blocks that cover it go
// through a buffer of its own as a request of their own (hit, miss,
// write-back or write-through, as any), answered to this, which copies a
// read's bytes out and answers the caller. A write with partial blocks
// first holds its lines' stripes and reads those blocks' other bytes (from
// the cache where valid, else from the origin), then hands the stripes to
// the whole-block write: nothing changes the blocks in between.
struct AsyncEdges final : IoCompletion, ReactorTask, EngineCompletion {
  Engine::Impl* im = nullptr;
  Reactor* reactor = nullptr;
  AsyncJob job{AsyncJob::kRead};  // as the caller sent it
  uint64_t begin = 0, end = 0;    // the whole blocks that cover it
  AlignedBuffer bounce;           // [begin, end); keeps its size in the pool
  std::vector<Segment> segments;  // of [begin, end)
  std::vector<size_t> stripes;    // a write with partial blocks: held exclusively, sorted
  std::vector<AsyncIo> ios;       // the partial blocks' reads (at most two)
  struct Edge {
    bool from_cache;  // else from the origin
    uint32_t slot, block;  // the cached block's, to prove it
    uint64_t line;
    bool failed_checksum = false;  // read from the origin instead (counted once the write takes it)
  };
  std::vector<Edge> edges;  // per read in `ios`
  std::vector<uint64_t> unread;  // blocks whose origin read failed (volume offsets)
  size_t pending = 0;

  void IoDone(AsyncIo&) override {
    if (--pending != 0) return;
    if (Reactor::Current() == reactor) return Run();
    reactor->Post(this);
  }
  // On its reactor once the partial blocks are read.
  void Run() override { im->WriteWithEdges(*this); }
  // The whole blocks' answer.
  void Done(Status status) override { im->EdgesAnswered(*this, std::move(status)); }
};

// The victims a reactor request evicted for its lines (TakeSlotOnReactor):
// the deletes of their records go into the store ahead of the records of
// their slots' new lines (in the same batch); then EndEvictions lists the
// evictions and lets go of the stripes claimed for them.
struct ReactorEvictions {
  std::vector<uint64_t> lines;   // the victims' lines
  std::vector<uint32_t> slots;   // their slots, now the request's
  std::vector<size_t> stripes;   // claimed for them, beyond the request's own
  bool empty() const { return lines.empty() && stripes.empty(); }
  void AddDeletes(MetadataStore::Batch& batch) const {
    for (uint32_t slot : slots) batch.DeleteLine(slot);
  }
};

// One read served on a reactor, from the moment its stripes are held until
// they are let go.
struct AsyncHit final : IoCompletion {
  Engine::Impl* im = nullptr;
  uint64_t offset = 0, length = 0;
  uint8_t* out = nullptr;
  bool bypass = false;
  EngineCompletion* done = nullptr;
  std::vector<Segment> segments;
  std::vector<uint32_t> slots;
  std::vector<size_t> stripes;  // held shared, sorted
  std::vector<AsyncIo> ios;
  // The RAM tier's share (engine_ram.cc): per segment, copied from it (empty
  // with the tier off); the blocks copied; when some were, per block of
  // the request, read from the cache instead.
  std::vector<uint8_t> in_ram;
  uint64_t ram_blocks = 0;
  std::vector<uint8_t> from_cache;
  size_t pending = 0;

  bool InRam(size_t segment) const { return !in_ram.empty() && in_ram[segment]; }
  void IoDone(AsyncIo&) override {
    if (--pending == 0) im->FinishReadHit(*this);
  }
};

// A request whose records the record committer puts: it adds them (its
// lines' stripes still held), and once the store write is done lets go of
// its lines and returns its answer, which the committer then gives.
class CommitJob {
 public:
  virtual void AddRecords(MetadataStore::Batch& batch) = 0;
  // Whether its records must be durable before Committed (the store is
  // then synced once for every such job of the group).
  virtual bool NeedsSync() const { return false; }
  // Whether the cache side (its data, the dirty-region map) must be
  // flushed before its records are put (once for the group).
  virtual bool NeedsCacheFlush() const { return false; }
  // `put`: the store write's outcome (and its sync's, when asked for).
  // An answer with no completion gives none (the request goes on).
  virtual Engine::Impl::PendingAnswer Committed(const Status& put) = 0;

 protected:
  ~CommitJob() = default;
};

// One write-back write served on a reactor: its lines cached, its stripes
// held exclusively and its flush epoch entered from its decision until its
// records are put.
struct AsyncWrite final : IoCompletion, ReactorTask, CommitJob {
  Engine::Impl* im = nullptr;
  uint64_t offset = 0, length = 0;
  const uint8_t* in = nullptr;
  bool fua = false;
  EngineCompletion* done = nullptr;
  uint64_t epoch = 0;
  Engine::Impl::Tally tally;
  std::vector<Segment> segments;
  std::vector<uint32_t> slots;
  std::vector<size_t> stripes;   // held exclusively, sorted
  std::vector<AsyncIo> ios;      // the cache writes, adjacent segments in one
  std::vector<uint32_t> io_of;   // per segment: its write in `ios`
  ReactorEvictions evictions;    // victims of its lines' placement
  bool announcing = false;          // those records are with the committer
  bool flush_first = false;         // a running sync promises a block maybe not on the cache yet
  bool place_later = false;         // announcing: its lines not cached are placed once it has
  struct Resume final : ReactorTask {  // back on its reactor once announced
    AsyncWrite* w = nullptr;
    Reactor* reactor = nullptr;
    void Run() override { w->im->SubmitWriteBack(*w); }
  } resume;
  std::vector<size_t> to_place;  // PlaceLines's: segments not cached
  std::vector<uint64_t> placed_lines;
  std::vector<uint32_t> placed_slots;
  size_t pending = 0;

  // Back in the pool: arrays grown for a long request are let go. A long
  // write placed line by line takes a pooled write per line, each of which
  // would otherwise keep what its last whole request needed (a megabyte
  // write: a few KiB each, hundreds of them held for good).
  void ShedLargeArrays() {
    constexpr size_t kKept = 64;  // segments: 256 KiB in 4 KiB lines
    if (segments.capacity() <= kKept) return;
    for (auto* v : {&slots, &io_of, &placed_slots}) std::vector<uint32_t>().swap(*v);
    for (auto* v : {&stripes, &to_place}) std::vector<size_t>().swap(*v);
    std::vector<Segment>().swap(segments);
    std::vector<AsyncIo>().swap(ios);
    std::vector<uint64_t>().swap(placed_lines);
  }

  void IoDone(AsyncIo&) override {
    if (--pending == 0) im->WriteBackLanded(*this);
  }
  // On the continuation thread, after a cache write failed: the rest blocks.
  void Run() override { im->FinishWriteBack(*this); }
  void AddRecords(MetadataStore::Batch& batch) override {
    if (announcing) return im->MarkAnnouncements(*this, batch);
    evictions.AddDeletes(batch);  // ahead of their slots' new records
    for (uint32_t slot : slots) batch.PutLine(slot, im->slots.BuildRecord(slot, true));
  }
  bool NeedsSync() const override { return announcing; }
  bool NeedsCacheFlush() const override { return announcing && flush_first; }
  Engine::Impl::PendingAnswer Committed(const Status& put) override {
    return im->WriteBackCommitted(*this, put);
  }
};

// One read that misses, served on a reactor: its stripes held exclusively
// from its decision until its promotion's records are put.
struct AsyncMiss final : IoCompletion, CommitJob {
  Engine::Impl* im = nullptr;
  uint64_t offset = 0, length = 0;
  uint8_t* out = nullptr;
  bool bypass = false;
  bool promote = false;    // the missing blocks go into the cache
  bool promoting = false;  // `ios` are the promotion's cache writes
  EngineCompletion* done = nullptr;
  Engine::Impl::Tally tally;
  std::vector<Segment> segments;
  std::vector<uint32_t> slots;     // kNoSlot: not cached
  std::vector<size_t> stripes;     // held exclusively, sorted
  std::vector<uint8_t> cached;     // per block of the request: read from the cache
  std::vector<AsyncIo> ios;        // the reads, then the promotion's writes
  std::vector<uint8_t> on_origin;  // per read: from the origin
  std::vector<uint32_t> promoted;  // slots the promotion wrote into (or repaired: their records)
  ReactorEvictions evictions;      // victims of the promotion
  RecordBatch emptied;             // slots a failed promotion left empty
  size_t pending = 0;
  // Clean cached blocks not proven (a failed read, a checksum that fails):
  // read again from the origin (`ios`, while `repairing`), then dropped
  // from the cache and promoted afresh, as a miss of theirs.
  bool repairing = false;
  struct Repair {
    size_t block;         // among the request's blocks
    uint32_t slot, index;  // the cached block
    bool checksum;        // it failed its checksum (else its read failed)
  };
  std::vector<Repair> repair;
  std::vector<uint32_t> repaired;  // their slots, once dropped (records to put)
  bool sync_records = false;       // a stable (synced) block was dropped

  void IoDone(AsyncIo&) override {
    if (--pending == 0) im->MissLanded(*this);
  }
  void AddRecords(MetadataStore::Batch& batch) override {
    evictions.AddDeletes(batch);  // ahead of their slots' new records
    im->AddLineRecords(promoted, emptied, batch, /*settle=*/true);
  }
  // A dropped stable block's durable record vouches for its old data until
  // the new one is synced.
  bool NeedsSync() const override { return sync_records; }
  Engine::Impl::PendingAnswer Committed(const Status&) override { return im->FinishMiss(*this); }
};

// One write in a mode other than write-back (or bypassing the cache in
// write-back) served on a reactor: the origin write, then the cached
// copies, then their records, for all its lines at once. Its stripes are held exclusively from its decision to its records.
struct AsyncThrough final : IoCompletion, ReactorTask, CommitJob {
  enum Phase { kAnnouncing, kOrigin, kCopies, kRecording };
  Engine::Impl* im = nullptr;
  Reactor* reactor = nullptr;
  Phase phase = kOrigin;
  uint64_t offset = 0, length = 0;
  const uint8_t* in = nullptr;
  // What the origin takes: [offset, offset + length) from `in`, unless the
  // blocks hold bytes not known (Engine::Impl::ExactOriginWrite).
  uint64_t origin_offset = 0, origin_length = 0;
  const uint8_t* origin_in = nullptr;
  std::vector<uint64_t> unknown_blocks;  // volume offsets: dropped from the cache
  bool fua = false;
  bool keep_copies = false;  // the cached copies take the new data (else they are dropped)
  bool allocate = false;     // lines not cached are cached (write-through)
  EngineCompletion* done = nullptr;
  Engine::Impl::Tally tally;
  Status result;
  std::vector<Segment> segments;
  std::vector<uint32_t> slots;      // kNoSlot: not cached
  std::vector<uint64_t> lines;      // of the segments, for AnyRecentlyEvicted
  std::vector<size_t> stripes;      // held exclusively, sorted
  std::vector<uint32_t> announced;  // slots whose records change before the origin does
  std::vector<LineRecord> announced_records;  // built with the marks
  bool sync_first = false;          // announcements, or a recent eviction of a line
  std::vector<uint32_t> hit_slots;  // NoteThroughHits's
  std::vector<AsyncIo> ios;         // the origin write, then the copies' writes
  struct Copy {
    uint32_t slot, first, end;  // blocks [first, end) of the slot
  };
  std::vector<Copy> copies;         // per copy's write in `ios`
  ReactorEvictions evictions;       // victims of lines cached now
  RecordBatch emptied;              // slots left with no valid block
  size_t pending = 0;

  void IoDone(AsyncIo&) override {
    if (--pending == 0) im->ThroughLanded(*this);
  }
  // Back on its reactor once its announcements are durable.
  void Run() override { im->WriteThroughOrigin(*this); }
  void AddRecords(MetadataStore::Batch& batch) override { im->AddThroughRecords(*this, batch); }
  bool NeedsSync() const override { return phase == kAnnouncing; }
  Engine::Impl::PendingAnswer Committed(const Status& put) override { return im->ThroughCommitted(*this, put); }
};

// One trim served on a reactor (engine_async_trim.cc): its stripes held
// exclusively from its decision until the origin's discard has landed.
struct AsyncTrim final : IoCompletion, ReactorTask, CommitJob {
  Engine::Impl* im = nullptr;
  Reactor* reactor = nullptr;
  uint64_t offset = 0, length = 0;
  EngineCompletion* done = nullptr;
  bool discard_origin = false;  // the origin trims too
  bool sync = false;            // its records are synced before the answer or the origin's discard
  std::vector<Segment> segments;
  std::vector<uint32_t> slots;  // of its lines that are cached
  std::vector<size_t> stripes;  // held exclusively, sorted
  RecordBatch emptied;          // slots left with no valid block
  AsyncIo io;                   // the origin's discard

  void IoDone(AsyncIo&) override { im->TrimDiscarded(*this); }
  void Run() override { im->DiscardTrimmedOrigin(*this); }
  void AddRecords(MetadataStore::Batch& batch) override { im->AddTrimRecords(*this, batch); }
  bool NeedsSync() const override { return sync; }
  Engine::Impl::PendingAnswer Committed(const Status& put) override { return im->TrimCommitted(*this, put); }
};

// Puts the records of reactor requests whose data has landed (writes, and
// the promotions of misses), on a thread of its own: a reactor never waits
// for the store (a log sync holds its writes back), and the records of
// every request that landed meanwhile go in one store write. Then each
// request lets go of its lines, and once all have, each is answered.
class RecordCommitter {
 public:
  explicit RecordCommitter(Engine::Impl& im);
  // Commits what is queued, then joins (idempotent).
  void Stop();
  ~RecordCommitter() { Stop(); }
  void Commit(CommitJob* job);
  // Returns once nothing is queued or being committed.
  void Drain();

 private:
  void Loop();
  // Commits group_: the cache side flushed if a job needs it, every job's
  // records in one store write, one sync if a job needs it, then the
  // jobs' answers.
  void CommitGroup();

  Engine::Impl& im_;
  Mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::vector<CommitJob*> queue_ GUARDED_BY(mu_);
  bool busy_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<CommitJob*> group_;  // the committer thread's
  MetadataStore::Batch records_;    // the committer thread's
  std::vector<Engine::Impl::PendingAnswer> answers_;  // the committer thread's
  std::thread thread_;
};

struct AsyncState {
  explicit AsyncState(Engine::Impl& im)
      : own(im),
        committer(im),
        continuations(im, 1, "cachectl-rest"),
        syncs(im, 1, "cachectl-sync") {}
  // Runs what is queued and joins every thread: the engine's own reactor
  // (its requests use the rest), the continuations, then the committer,
  // then the sync thread; called while the engine's `async` still points
  // here (what runs meanwhile uses it).
  void Stop() {
    own.Stop();
    continuations.Stop();
    committer.Stop();
    syncs.Stop();
  }
  RequestPool<AsyncHit> hits;
  RequestPool<AsyncWrite> writes;
  RequestPool<AsyncMiss> misses;
  RequestPool<AsyncThrough> throughs;
  RequestPool<AsyncTrim> trims;
  RequestPool<Engine::Impl::SyncWaiter> sync_waiters;
  RequestPool<ParkedRequest> parked;
  RequestPool<SplitRequest> splits;
  RequestPool<AsyncEdges> edges;
  RequestPool<DelayedRequest> delayed;
  std::atomic<bool> metadata_sync_queued{false};  // one kSyncMetadata job at a time
  OwnReactor own;
  RecordCommitter committer;
  // The rests of requests that hold stripes and an epoch (kContinue): on a
  // thread of their own, never queued behind anything that may wait for
  // exactly what they hold (syncs waiting for the epoch).
  AsyncWorkers continuations;
  // The group commit's rounds for asynchronous waiters (kLeadSync) and the
  // syncs that bound unsynced evictions (kSyncMetadata): on a thread of
  // their own, so that a sync never waits behind requests, and requests
  // (whatever they wait for) never hold up the sync that would answer them.
  // A round waits only for writers of the epoch before it, which finish
  // without this thread.
  AsyncWorkers syncs;
};

}  // namespace cachecore
