// Asynchronous requests. A read that hits in full, on a reactor, is served
// there: its lines' stripes try-locked (never waited for: a reactor never
// blocks; a request that finds one busy parks on it), its cache reads
// submitted on the reactor's ring beside everything else in flight, its
// blocks proven by their checksums when they land, and the stripes let go
// on the same thread. So are misses (engine_async_miss.cc), write-back
// writes (engine_async_write.cc), writes in the other modes
// (engine_async_through.cc), trims (engine_async_trim.cc) and requests not
// in whole blocks (engine_async_edges.cc); syncs wait in the group commit
// (engine_sync.cc); one that must wait for a line being cleaned parks until
// the cleaning ends. A read whose I/O fails is answered there too (every
// failed read counted), and a clean block to repair from the origin (a
// checksum that fails, a cache read that failed) is read again by the miss
// path. Requests made off any reactor are served on the engine's own
// (engine_own_reactor.cc), and a synchronous call on a reactor of the
// calling thread's. No request has a thread of its own: where io_uring
// cannot be used the reactors run on epoll and libaio (Reactor::UsesIoUring),
// and a device whose requests wait is waited for on the reactor.
#include <algorithm>

#include "cachecore/metadata/checksum.h"
#include "base/thread_name.h"
#include "engine/engine_async.h"

namespace cachecore {

// ---- the helper threads

AsyncWorkers::AsyncWorkers(Engine::Impl& im, uint32_t threads, const char* name) : im_(im) {
  for (uint32_t i = 0; i < std::max(1u, threads); ++i) {
    threads_.emplace_back([this, name] { Loop(name); });
  }
}

void AsyncWorkers::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void AsyncWorkers::Run(const AsyncJob& job) {
  {
    MutexLock lock(mu_);
    queue_.push_back(job);
  }
  cv_.notify_one();
}

void AsyncWorkers::Drain() {
  MutexLock lock(mu_);
  lock.Wait(idle_cv_, [this] {
    mu_.AssertHeld();
    return queue_.empty() && running_ == 0;
  });
}

void AsyncWorkers::Loop(const char* name) {
  NameThisThread(name);
  MutexLock lock(mu_);
  while (true) {
    lock.Wait(cv_, [this] {
      mu_.AssertHeld();
      return stop_ || !queue_.empty();
    });
    if (queue_.empty()) return;  // stopping, and nothing left
    AsyncJob job = queue_.front();
    queue_.pop_front();
    ++running_;
    lock.Unlock();
    if (job.kind == AsyncJob::kContinue) job.next->Run();
    else if (job.kind == AsyncJob::kLeadSync) im_.LeadQueuedSync();
    else SyncMetadataOnce();  // kSyncMetadata: no request is queued here
    lock.Lock();
    if (--running_ == 0 && queue_.empty()) idle_cv_.notify_all();
  }
}

void AsyncWorkers::SyncMetadataOnce() {
  im_.async->metadata_sync_queued.store(false);  // a need seen from here on queues another
  (void)im_.SyncMetadata();  // a failure is counted
}

AsyncState& Engine::Impl::Async() {
  std::call_once(async_started, [this] { async.reset(new AsyncState(*this)); });
  return *async;
}

void Engine::Impl::QueueMetadataSyncIf(bool due) {
  // Bounds the unsynced evictions, off the reactor, one job at a time.
  if (due && !Async().metadata_sync_queued.exchange(true)) async->syncs.Run({AsyncJob::kSyncMetadata});
}

void Engine::Impl::AsyncDeleter::operator()(AsyncState* state) const { delete state; }

// ---- stripes held across a reactor's I/O

void Engine::Impl::SplitIntoSegments(uint64_t offset, uint64_t length,
                                     std::vector<Segment>& segments) const {
  segments.clear();
  (void)ForEachSegment(offset, length, line_size, [&](const Segment& seg, uint64_t) {
    segments.push_back(seg);
    return Status::Ok();
  });
}

bool Engine::Impl::TryHoldStripes(std::span<const Segment> segments, std::vector<size_t>& held,
                                  bool exclusive, size_t& busy) {
  held.clear();
  for (const Segment& seg : segments) held.push_back(StripeIndex(seg.line));
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  for (size_t i = 0; i < held.size(); ++i) {
    if (exclusive ? stripes[held[i]].try_lock_unwanted() : stripes[held[i]].try_lock_shared()) continue;
    busy = held[i];
    ReleaseStripes({held.data(), i}, exclusive);
    return false;
  }
  return true;
}

void Engine::Impl::ReleaseStripes(std::span<const size_t> held, bool exclusive) {
  for (size_t s : held) {
    if (exclusive) stripes[s].unlock();
    else stripes[s].unlock_shared();
  }
}

// ---- hits on the reactor

// Whether every block of the hit's lines is cached (its stripes held).
bool Engine::Impl::AllBlocksCached(AsyncHit& hit) {
  hit.slots.clear();
  slots.FindEach(hit.segments.size(), [&hit](size_t i) { return hit.segments[i].line; }, hit.slots);
  for (size_t i = 0; i < hit.segments.size(); ++i) {
    const Segment& seg = hit.segments[i];
    if (hit.InRam(i)) continue;
    if (hit.slots[i] == SlotTable::kNoSlot) return false;
    for (uint32_t b = seg.first_block(); b < seg.end_block(); ++b) {
      if (!(slots.Flags(hit.slots[i], b) & kValid)) return false;
    }
  }
  return true;
}

// One cache read per run of blocks contiguous both in the cache and in the
// caller's buffer; none for what the RAM tier gave.
void Engine::Impl::PlanHitReads(AsyncHit& hit) {
  hit.ios.clear();
  uint8_t* dst = hit.out;
  for (size_t i = 0; i < hit.segments.size(); ++i) {
    const Segment& seg = hit.segments[i];
    uint64_t at = SlotOffset(hit.slots[i], seg.first_block());
    uint64_t bytes = uint64_t{seg.end_block() - seg.first_block()} * kBlockSize;
    if (hit.InRam(i)) {
      dst += bytes;
      continue;
    }
    if (!hit.ios.empty()) {
      IoRequest& last = hit.ios.back().request;
      if (last.offset + last.length == at && static_cast<uint8_t*>(last.buffer) + last.length == dst) {
        last.length += bytes;
        dst += bytes;
        continue;
      }
    }
    hit.ios.emplace_back();
    hit.ios.back().request = {IoOp::kRead, at, bytes, dst, Status()};
    hit.ios.back().done = &hit;
    dst += bytes;
  }
}

bool Engine::Impl::TryReadHitAsync(uint64_t offset, uint8_t* out, uint64_t length, bool bypass,
                                   EngineCompletion* done, size_t& busy) {
  if (offset % kBlockSize || length % kBlockSize || length > kMaxOnReactor ||
      reinterpret_cast<uintptr_t>(out) % kSectorSize) {
    return false;
  }
  std::unique_ptr<AsyncHit> hit = Async().hits.Take();
  hit->im = this;
  hit->offset = offset;
  hit->length = length;
  hit->out = out;
  hit->bypass = bypass;
  hit->done = done;
  SplitIntoSegments(offset, length, hit->segments);
  if (!TryHoldStripes(hit->segments, hit->stripes, /*exclusive=*/false, busy)) {
    async->hits.Give(std::move(hit));
    return false;
  }
  if (ServedFromRam(*hit)) {
    hit.release();  // answered, and back in the pool
    return true;
  }
  if (!AllBlocksCached(*hit)) {
    ReleaseStripes(hit->stripes, false);
    async->hits.Give(std::move(hit));
    return false;
  }
  slots.NoteHits(hit->slots);
  PlanHitReads(*hit);
  SubmitAll(*dev.cache, *hit.release());  // owned by its completions from here
  return true;
}

bool ReadOfBlockFailed(std::span<const AsyncIo> ios, const uint8_t* block) {
  for (const AsyncIo& io : ios) {
    const auto* begin = static_cast<const uint8_t*>(io.request.buffer);
    if (!io.request.status.ok() && block >= begin && block < begin + io.request.length) return true;
  }
  return false;
}

Engine::Impl::ReadProof Engine::Impl::ProveReads(std::span<const AsyncIo> ios,
                                                 const std::vector<uint8_t>* on_origin,
                                                 std::span<const Segment> segments,
                                                 std::span<const uint32_t> slots_of,
                                                 const std::vector<uint8_t>* cached, const uint8_t* out) {
  bool any_failed = false;
  const AsyncIo* origin_failed = nullptr;
  for (size_t k = 0; k < ios.size(); ++k) {
    if (ios[k].request.status.ok()) continue;
    any_failed = true;
    if (on_origin == nullptr || !(*on_origin)[k]) {
      CountCacheError(stats.cache_read_err);
      continue;
    }
    LiveStats::Bump(stats.origin_read_err);
    if (origin_failed == nullptr) origin_failed = &ios[k];
  }
  if (origin_failed != nullptr) return {ReadProof::kFailed, origin_failed->request.status};
  bool repair = false;
  size_t block = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& seg = segments[i];
    for (uint32_t b = seg.first_block(); b < seg.end_block(); ++b, ++block) {
      if (cached != nullptr && !(*cached)[block]) continue;
      const uint8_t* data = out + block * kBlockSize;
      const bool unread = any_failed && ReadOfBlockFailed(ios, data);
      if (CachedBlockProven(slots_of[i], b, data, unread)) continue;
      if (slots.Flags(slots_of[i], b) & kDirty) return {ReadProof::kFailed, DirtyBlockLost(seg.line, b, unread)};
      repair = true;  // the origin has it
    }
  }
  return {repair ? ReadProof::kRepair : ReadProof::kProven, Status()};
}

void Engine::Impl::FinishReadHit(AsyncHit& hit) {
  const std::vector<uint8_t>* from_cache = hit.ram_blocks > 0 ? &hit.from_cache : nullptr;
  ReadProof proof = ProveReads(hit.ios, nullptr, hit.segments, hit.slots, from_cache, hit.out);
  if (proof.kind == ReadProof::kProven) FillRam(hit);  // the stripes still held: nothing changed it
  ReleaseStripes(hit.stripes, false);
  std::unique_ptr<AsyncHit> owned(&hit);
  EngineCompletion* done = hit.done;
  uint64_t offset = hit.offset, length = hit.length;
  uint8_t* out = hit.out;
  bool bypass = hit.bypass;
  const uint64_t ram_blocks = hit.ram_blocks;
  async->hits.Give(std::move(owned));
  if (proof.kind == ReadProof::kFailed) {
    CountReads({length / kBlockSize, 0}, offset);  // a failed read is counted too
    return Answer(done, std::move(proof.status));
  }
  if (proof.kind == ReadProof::kRepair) {
    // Nothing counted but the errors: read again by the miss path, which
    // holds the lines exclusively and repairs the clean blocks from the
    // origin (a transient cache error may read right this time; the
    // checksum proves it either way).
    AsyncJob again{AsyncJob::kRead, offset, length, out, false, bypass, done};
    again.not_a_hit = true;
    if (Reactor::Current() == nullptr) return RunOffReactor(again);
    return RunOnReactor(again, nullptr);
  }
  CountReads({length / kBlockSize, 0}, offset);
  LiveStats::Bump(stats.ram_hits, ram_blocks);
  Answer(done, Status::Ok());
}

// ---- parked on a busy stripe

namespace {

// How often a request that found a stripe busy, and then free when it
// came to park, tries again at once; then again after a delay (a thread
// asleep in lock() for the stripe takes it meanwhile).
constexpr int kTriesOnReactor = 4;
constexpr std::chrono::microseconds kStripeRetryDelay{50};

bool InWholeBlocks(const AsyncJob& j) {
  return j.offset % kBlockSize == 0 && j.length % kBlockSize == 0 &&
         reinterpret_cast<uintptr_t>(j.buffer) % kSectorSize == 0;
}

// The whole blocks that cover the request: what a reactor's request holds.
uint64_t CoveredBytes(const AsyncJob& j) {
  const uint64_t end = (j.offset + j.length + kBlockSize - 1) / kBlockSize * kBlockSize;
  return end - j.offset / kBlockSize * kBlockSize;
}

}  // namespace

bool Engine::Impl::TryOnReactor(const AsyncJob& j, size_t& busy) {
  if (j.kind == AsyncJob::kDiscard) return TryTrimAsync(j.offset, j.length, j.done, busy);
  if (!InWholeBlocks(j)) return TryEdgesAsync(j, busy);
  return TryWholeBlocksOnReactor(j, busy);
}

bool Engine::Impl::TryWholeBlocksOnReactor(const AsyncJob& j, size_t& busy, const std::vector<size_t>* held) {
  if (j.kind == AsyncJob::kWrite) {
    if (TryWriteBackAsync(j.offset, j.buffer, j.length, j.fua, j.bypass, j.done, busy, held)) return true;
    return busy == kNoStripe &&
           TryWriteThroughAsync(j.offset, j.buffer, j.length, j.fua, j.bypass, j.done, busy, held);
  }
  if (!j.not_a_hit && TryReadHitAsync(j.offset, j.buffer, j.length, j.bypass, j.done, busy)) return true;
  // A stripe busy for a hit is busy for a miss too.
  return busy == kNoStripe && TryReadMissAsync(j.offset, j.buffer, j.length, j.bypass, j.done, busy);
}

void Engine::Impl::RunOnReactor(AsyncJob job, ParkedRequest* parked) {
  if (shut_down.load()) {
    // After Shutdown (a request parked across it too: Shutdown drains the
    // engine's threads, not the parked), answered as the synchronous calls
    // are then.
    if (parked != nullptr) async->parked.Give(std::unique_ptr<ParkedRequest>(parked));
    return Answer(job.done, Status::Busy("the cache is shut down"));
  }
  if (CoveredBytes(job) > kMaxOnReactor) return SplitOnReactor(job, kMaxOnReactor);  // never a part
  size_t busy = kNoStripe;
  bool served = TryOnReactor(job, busy);
  for (int tries = 1; !served && busy != kNoStripe; ++tries) {
    if (parked == nullptr) parked = async->parked.Take().release();
    parked->im = this;
    parked->reactor = Reactor::Current();
    parked->job = job;
    // Woken on the reactor once the holder lets go (or the cleaning ends);
    // tried from the start.
    if (busy == kBusyCleaning) return ParkWhileCleaning(*parked);
    if (stripes[busy].park(parked)) return;
    // Nobody holds the stripe: let go since the try, or only marked by a
    // try that failed while hits held it. Mark cleared, tried again; a
    // stripe someone sleeps for (the sleeper takes it next), or taken and
    // let go over and over, is tried again a little later, on the reactor.
    if (tries == kTriesOnReactor || !stripes[busy].clear_marks_if_free()) break;
    busy = kNoStripe;
    served = TryOnReactor(job, busy);
  }
  if (parked != nullptr) async->parked.Give(std::unique_ptr<ParkedRequest>(parked));
  if (!served && busy != kNoStripe) return RunLater(job, kStripeRetryDelay);
  if (!served) NotServedOnReactor(job);
}

// Woken on its reactor once the cleaning of its lines ends; when it ended
// since the request looked, started over there at once.
void Engine::Impl::ParkWhileCleaning(ParkedRequest& parked) {
  const AsyncJob& job = parked.job;
  const uint64_t first = job.offset / line_size, last = (job.offset + job.length - 1) / line_size;
  if (!slots.ParkWhileCleaning(first, last, &parked)) parked.Unparked();
}

// A request the reactor's paths refused with nothing to wait for. Refused
// because the store failed (a write or trim needs it; the paths ask before
// they take anything): answered so. Otherwise a mode switch came between
// two paths' looks (write-back saw another mode, the other paths then saw
// write-back): started over a little later, when the mode reads the same
// to all of them. A request refused over and over is a fault of the paths
// (none is known): it fails, loudly, rather than wait for ever.
void Engine::Impl::NotServedOnReactor(const AsyncJob& job) {
  if (job.kind != AsyncJob::kRead && dev.metadata->failed()) {
    return Answer(job.done, RefuseIfMetadataFailed(*this));
  }
  constexpr uint16_t kMaxRefusals = 1000;  // 50 ms of retries
  if (job.refusals >= kMaxRefusals) {
    return Answer(job.done, Status::IoError("internal error: the request was refused by every path of the engine"));
  }
  AsyncJob again = job;
  ++again.refusals;
  RunLater(again, kStripeRetryDelay);
}

// ---- requests over kMaxOnReactor, in parts

// Cut at multiples of `cut` on the volume: for kMaxOnReactor, so that the
// whole blocks covering a part not in whole blocks stay within the limit.
void Engine::Impl::SplitOnReactor(const AsyncJob& job, uint64_t cut) {
  SplitRequest* split = Async().splits.Take().release();
  const uint64_t end = job.offset + job.length;
  const size_t parts = (end - 1) / cut - job.offset / cut + 1;
  split->im = this;
  split->done = job.done;
  split->fua = job.kind == AsyncJob::kWrite && job.fua;
  split->left.store(parts);
  {
    MutexLock lock(split->mu);
    split->first_error = Status::Ok();
  }
  // Each part is answered as a request of its own (stats.Answered).
  for (size_t i = 1; i < parts; ++i) stats.Taken();
  uint64_t at = job.offset;
  for (size_t i = 0; i < parts; ++i) {
    AsyncJob part = job;
    part.offset = at;
    part.length = std::min<uint64_t>((at / cut + 1) * cut, end) - at;
    if (part.buffer != nullptr) part.buffer = job.buffer + (at - job.offset);
    at += part.length;
    part.fua = false;
    part.done = split;
    RunOnReactor(part, nullptr);  // `split` may be answered and reused after the last
  }
}

void Engine::Impl::PartDone(SplitRequest& split, Status status) {
  if (!status.ok()) {
    MutexLock lock(split.mu);
    if (split.first_error.ok()) split.first_error = std::move(status);
  }
  if (split.left.fetch_sub(1) != 1) return;
  EngineCompletion* done = split.done;
  const bool fua = split.fua;
  Status result;
  {
    MutexLock lock(split.mu);
    result = std::move(split.first_error);
  }
  async->splits.Give(std::unique_ptr<SplitRequest>(&split));
  if (fua && result.ok()) {
    stats.Taken();  // the sync answers it as a request
    return GroupSyncAsync(done);  // durable once a sync covered every part
  }
  done->Done(std::move(result));
}

// ---- the entry points

void Engine::ReadAsync(uint64_t offset, void* buffer, uint64_t length, EngineCompletion* done) {
  LiveVolume* volume = nullptr;
  if (Status s = CheckRange(*impl_, offset, length, &volume); !s.ok()) return done->Done(s);
  impl_->stats.Taken();
  LiveStats::Bump(impl_->stats.read_requests);
  LiveStats::Bump(impl_->stats.read_bytes, length);
  LiveStats::Bump(volume->counters.read_requests);
  LiveStats::Bump(volume->counters.read_bytes, length);
  const bool bypass = impl_->BypassAndHeat(offset, length, *volume);
  const AsyncJob job{AsyncJob::kRead, offset, length, static_cast<uint8_t*>(buffer), false, bypass, done};
  if (Reactor::Current() != nullptr) return impl_->RunOnReactor(job, nullptr);
  impl_->RunOffReactor(job);
}

void Engine::WriteAsync(uint64_t offset, const void* buffer, uint64_t length, bool fua,
                        EngineCompletion* done) {
  LiveVolume* volume = nullptr;
  if (Status s = CheckRange(*impl_, offset, length, &volume); !s.ok()) return done->Done(s);
  if (Status s = RefuseIfMetadataFailed(*impl_); !s.ok()) return done->Done(s);
  impl_->stats.Taken();
  LiveStats::Bump(impl_->stats.write_requests);
  LiveStats::Bump(impl_->stats.write_bytes, length);
  LiveStats::Bump(volume->counters.write_requests);
  LiveStats::Bump(volume->counters.write_bytes, length);
  const bool bypass = impl_->BypassAndHeat(offset, length, *volume);
  // Only read from: the cast fits the job's one buffer field.
  auto* in = const_cast<uint8_t*>(static_cast<const uint8_t*>(buffer));
  AsyncJob job{AsyncJob::kWrite, offset, length, in, fua, bypass, done};
  if (Reactor::Current() == nullptr) {
    job.throttle = true;
    return impl_->RunOffReactor(job);
  }
  const std::chrono::microseconds delay = impl_->Throttle(offset, length, bypass);
  if (delay.count() == 0) return impl_->RunOnReactor(job, nullptr);
  impl_->RunLater(job, delay);
}

void Engine::Impl::RunLater(const AsyncJob& job, std::chrono::microseconds delay) {
  DelayedRequest* held = Async().delayed.Take().release();
  held->im = this;
  held->job = job;
  Reactor::Current()->After(std::chrono::nanoseconds(delay).count(), held);
}

void Engine::Impl::RunDelayed(DelayedRequest& held) {
  const AsyncJob job = held.job;
  async->delayed.Give(std::unique_ptr<DelayedRequest>(&held));
  RunOnReactor(job, nullptr);
}

void Engine::Impl::StopAsync() {
  if (async) async->Stop();
}

void Engine::Impl::RunOffReactor(const AsyncJob& job) {
  Status why;
  if (!Async().own.Run(job, why)) Answer(job.done, std::move(why));
}

void Engine::Impl::DrainWorkers() {
  if (!async) return;
  async->own.Drain();  // its requests may wait for what the rest runs
  async->continuations.Drain();
  async->committer.Drain();
  async->syncs.Drain();
}

void Engine::DiscardAsync(uint64_t offset, uint64_t length, EngineCompletion* done) {
  if (Status s = CheckRange(*impl_, offset, length); !s.ok()) return done->Done(s);
  impl_->stats.Taken();
  const AsyncJob job{AsyncJob::kDiscard, offset, length, nullptr, false, false, done};
  if (Reactor::Current() != nullptr) return impl_->RunOnReactor(job, nullptr);
  impl_->RunOffReactor(job);
}

// ---- the synchronous calls: the asynchronous ones on the caller's thread

namespace {

// The calling thread's reactors, one per depth of synchronous calls made
// from inside one (a step observer's): each call runs its own until its
// request is answered, so that an inner call never ends an outer's loop.
Result<Reactor*> ThreadsReactor(size_t depth) {
  thread_local std::vector<std::unique_ptr<Reactor>> own;
  while (own.size() <= depth) {
    Result<std::unique_ptr<Reactor>> made = Reactor::Create(64);
    if (!made.ok()) return made.status();
    own.push_back(std::move(made.value()));
  }
  return own[depth].get();
}

thread_local size_t sync_depth = 0;

// One synchronous request: submitted on the thread's reactor, which runs
// (its I/O, the engine's completions posted back to it) until the answer.
struct SyncCall final : EngineCompletion, ReactorTask {
  Engine* engine = nullptr;
  AsyncJob job{AsyncJob::kRead};
  Reactor* reactor = nullptr;
  Status status;
  void Run() override {
    if (job.kind == AsyncJob::kRead) engine->ReadAsync(job.offset, job.buffer, job.length, this);
    else if (job.kind == AsyncJob::kWrite) engine->WriteAsync(job.offset, job.buffer, job.length, job.fua, this);
    else engine->DiscardAsync(job.offset, job.length, this);
  }
  // On any thread; the status is read once the reactor has stopped.
  void Done(Status s) override {
    status = std::move(s);
    reactor->Stop();
  }
};

// On a reactor of this thread's, run until the request is answered.
Status RunSync(Engine& engine, const AsyncJob& job) {
  Result<Reactor*> reactor = ThreadsReactor(sync_depth);
  if (!reactor.ok()) return reactor.status();
  SyncCall call;
  call.engine = &engine;
  call.job = job;
  call.reactor = reactor.value();
  ++sync_depth;
  call.reactor->RunWith(&call);
  --sync_depth;
  return std::move(call.status);
}

}  // namespace

Status Engine::Read(uint64_t offset, void* buffer, uint64_t length) {
  return RunSync(*this, {AsyncJob::kRead, offset, length, static_cast<uint8_t*>(buffer), false, false, nullptr});
}

Status Engine::Write(uint64_t offset, const void* buffer, uint64_t length, bool fua) {
  // Only read from: the cast fits the job's one buffer field.
  auto* in = const_cast<uint8_t*>(static_cast<const uint8_t*>(buffer));
  return RunSync(*this, {AsyncJob::kWrite, offset, length, in, fua, false, nullptr});
}

Status Engine::Discard(uint64_t offset, uint64_t length) {
  return RunSync(*this, {AsyncJob::kDiscard, offset, length, nullptr, false, false, nullptr});
}

void Engine::SyncAsync(EngineCompletion* done) {
  if (impl_->shut_down.load()) return done->Done(Status::Busy("the cache is shut down"));
  if (Status s = RefuseIfMetadataFailed(*impl_); !s.ok()) return done->Done(s);
  impl_->stats.Taken();
  impl_->GroupSyncAsync(done);  // waits in the group, not on a thread
}

}  // namespace cachecore
