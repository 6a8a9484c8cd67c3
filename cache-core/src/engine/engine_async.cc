// Asynchronous requests. A read that hits in full, on a reactor, is served
// there: its lines' stripes try-locked (never waited for: a reactor never
// blocks), its cache reads submitted on the reactor's ring beside everything
// else in flight, its blocks proven by their checksums when they land, and
// the stripes let go on the same thread. Anything else (a miss, a busy
// stripe, a checksum that fails, writes, trims, syncs) runs on the engine's
// workers through the synchronous paths, which handle all of it.
#include <algorithm>
#include <condition_variable>
#include <deque>

#include "cachecore/metadata/checksum.h"
#include "engine/engine_impl.h"

namespace cachecore {

namespace {

// Past this a read is not served on the reactor (its lines would hold many
// stripes across the I/O); the workers batch it.
constexpr uint64_t kMaxAsyncHit = 1 << 20;

}  // namespace

// ---- the workers

struct AsyncJob {
  enum Kind { kRead, kWrite, kDiscard, kSync } kind;
  uint64_t offset = 0, length = 0;
  uint8_t* buffer = nullptr;
  bool fua = false, bypass = false;
  EngineCompletion* done = nullptr;
};

class AsyncWorkers {
 public:
  AsyncWorkers(Engine::Impl& im, uint32_t threads) : im_(im) {
    for (uint32_t i = 0; i < std::max(1u, threads); ++i) threads_.emplace_back([this] { Loop(); });
  }
  // Runs what is queued, then joins.
  ~AsyncWorkers() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  void Run(const AsyncJob& job) {
    {
      MutexLock lock(mu_);
      queue_.push_back(job);
    }
    cv_.notify_one();
  }
  // Returns once nothing is queued or running (Engine::Shutdown: what was
  // taken completes before the clean shutdown is recorded).
  void Drain() {
    MutexLock lock(mu_);
    lock.Wait(idle_cv_, [this] {
      mu_.AssertHeld();
      return queue_.empty() && running_ == 0;
    });
  }

 private:
  void Loop() {
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
      im_.Answer(job.done, Execute(job));
      lock.Lock();
      if (--running_ == 0 && queue_.empty()) idle_cv_.notify_all();
    }
  }

  Status Execute(const AsyncJob& job) {
    // After Shutdown, as the synchronous calls answer then.
    if (im_.shut_down.load()) return Status::Busy("the cache is shut down");
    switch (job.kind) {
      case AsyncJob::kRead: return im_.ReadRequest(job.offset, job.buffer, job.length, job.bypass);
      case AsyncJob::kWrite:
        return im_.WriteRequest(job.offset, job.buffer, job.length, job.fua, job.bypass);
      case AsyncJob::kDiscard: return im_.DiscardRequest(job.offset, job.length);
      case AsyncJob::kSync: return im_.SyncRequest();
    }
    return Status::InvalidArgument("unknown request");
  }

  Engine::Impl& im_;
  Mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<AsyncJob> queue_ GUARDED_BY(mu_);
  uint32_t running_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// ---- hits on the reactor

// One read served on a reactor, from the moment its stripes are held until
// they are let go. Reused (HitPool): its vectors keep their capacity, so a
// warm reactor allocates nothing per request.
struct AsyncHit final : IoCompletion {
  Engine::Impl* im = nullptr;
  uint64_t offset = 0, length = 0;
  uint8_t* out = nullptr;
  bool bypass = false;
  EngineCompletion* done = nullptr;
  std::vector<Segment> segments;
  std::vector<uint32_t> slots;
  std::vector<size_t> stripes;  // held, sorted
  std::vector<AsyncIo> ios;
  size_t pending = 0;

  void IoDone(AsyncIo&) override {
    if (--pending == 0) im->FinishReadHit(*this);
  }
};

struct HitPool {
  Mutex mu;
  std::vector<std::unique_ptr<AsyncHit>> spare GUARDED_BY(mu);

  std::unique_ptr<AsyncHit> Take() {
    MutexLock lock(mu);
    if (spare.empty()) return std::make_unique<AsyncHit>();
    std::unique_ptr<AsyncHit> hit = std::move(spare.back());
    spare.pop_back();
    return hit;
  }
  void Give(std::unique_ptr<AsyncHit> hit) {
    MutexLock lock(mu);
    spare.push_back(std::move(hit));
  }
};

AsyncWorkers& Engine::Impl::Workers() {
  std::call_once(workers_started, [this] {
    workers.reset(new AsyncWorkers(*this, config.workers));
    hit_pool.reset(new HitPool);
  });
  return *workers;
}

void Engine::Impl::AsyncDeleter::operator()(AsyncWorkers* w) const { delete w; }
void Engine::Impl::AsyncDeleter::operator()(HitPool* p) const { delete p; }

// Takes every stripe of the hit's lines, shared, without waiting: hits on
// one line run side by side, anything that changes a line excludes them.
// False (holding none) when one is held exclusively or wanted so.
bool Engine::Impl::TryHoldStripes(AsyncHit& hit) {
  hit.stripes.clear();
  for (const Segment& seg : hit.segments) hit.stripes.push_back(StripeIndex(seg.line));
  std::sort(hit.stripes.begin(), hit.stripes.end());
  hit.stripes.erase(std::unique(hit.stripes.begin(), hit.stripes.end()), hit.stripes.end());
  for (size_t i = 0; i < hit.stripes.size(); ++i) {
    if (stripes[hit.stripes[i]].try_lock_shared()) continue;
    while (i > 0) stripes[hit.stripes[--i]].unlock_shared();
    return false;
  }
  return true;
}

void Engine::Impl::ReleaseStripes(const AsyncHit& hit) {
  for (size_t s : hit.stripes) stripes[s].unlock_shared();
}

// Whether every block of the hit's lines is cached (its stripes held).
bool Engine::Impl::AllBlocksCached(AsyncHit& hit) {
  hit.slots.clear();
  slots.FindEach(hit.segments.size(), [&hit](size_t i) { return hit.segments[i].line; }, hit.slots);
  for (size_t i = 0; i < hit.segments.size(); ++i) {
    const Segment& seg = hit.segments[i];
    if (hit.slots[i] == SlotTable::kNoSlot) return false;
    for (uint32_t b = seg.first_block(); b < seg.end_block(); ++b) {
      if (!(slots.Flags(hit.slots[i], b) & kValid)) return false;
    }
  }
  return true;
}

// One cache read per run of blocks contiguous both in the cache and in the
// caller's buffer.
void Engine::Impl::PlanHitReads(AsyncHit& hit) {
  hit.ios.clear();
  uint8_t* dst = hit.out;
  for (size_t i = 0; i < hit.segments.size(); ++i) {
    const Segment& seg = hit.segments[i];
    uint64_t at = SlotOffset(hit.slots[i], seg.first_block());
    uint64_t bytes = uint64_t{seg.end_block() - seg.first_block()} * kBlockSize;
    if (!hit.ios.empty()) {
      IoRequest& last = hit.ios.back().request;
      if (last.offset + last.length == at) {
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
                                   EngineCompletion* done) {
  if (offset % kBlockSize || length % kBlockSize || length > kMaxAsyncHit ||
      reinterpret_cast<uintptr_t>(out) % kSectorSize) {
    return false;
  }
  Workers();  // the pool of hits comes with the workers
  std::unique_ptr<AsyncHit> hit = hit_pool->Take();
  hit->im = this;
  hit->offset = offset;
  hit->length = length;
  hit->out = out;
  hit->bypass = bypass;
  hit->done = done;
  hit->segments.clear();
  (void)ForEachSegment(offset, length, line_size, [&](const Segment& seg, uint64_t) {
    hit->segments.push_back(seg);
    return Status::Ok();
  });
  if (!TryHoldStripes(*hit)) {
    hit_pool->Give(std::move(hit));
    return false;
  }
  if (!AllBlocksCached(*hit)) {
    ReleaseStripes(*hit);
    hit_pool->Give(std::move(hit));
    return false;
  }
  slots.NoteHits(hit->slots);
  PlanHitReads(*hit);
  // One count more than the reads, dropped after the last is submitted: a
  // device that completes inline cannot finish the hit under this loop.
  hit->pending = hit->ios.size() + 1;
  AsyncHit* h = hit.release();  // owned by its completions from here
  for (AsyncIo& io : h->ios) dev.cache->Submit(io);
  h->IoDone(h->ios.front());
  return true;
}

// Every block proven, or nothing is counted and the workers read it again
// (they repair a clean block from the origin, or fail a dirty one).
bool Engine::Impl::HitBlocksProven(const AsyncHit& hit) {
  for (const AsyncIo& io : hit.ios) {
    if (!io.request.status.ok()) return false;
  }
  const uint8_t* block = hit.out;
  for (size_t i = 0; i < hit.segments.size(); ++i) {
    const Segment& seg = hit.segments[i];
    for (uint32_t b = seg.first_block(); b < seg.end_block(); ++b, block += kBlockSize) {
      if (Crc32c(block, kBlockSize) != slots.Crc(hit.slots[i], b)) return false;
    }
  }
  return true;
}

void Engine::Impl::FinishReadHit(AsyncHit& hit) {
  bool proven = HitBlocksProven(hit);
  ReleaseStripes(hit);
  std::unique_ptr<AsyncHit> owned(&hit);
  EngineCompletion* done = hit.done;
  uint64_t offset = hit.offset, length = hit.length;
  uint8_t* out = hit.out;
  bool bypass = hit.bypass;
  hit_pool->Give(std::move(owned));
  if (!proven) {
    Workers().Run({AsyncJob::kRead, offset, length, out, false, bypass, done});
    return;
  }
  CountReads({length / kBlockSize, 0});
  Answer(done, Status::Ok());
}

// ---- the entry points

void Engine::ReadAsync(uint64_t offset, void* buffer, uint64_t length, EngineCompletion* done) {
  if (Status s = CheckRange(*impl_, offset, length); !s.ok()) return done->Done(s);
  impl_->stats.Taken();
  const bool bypass = impl_->BypassAndHeat(offset, length);
  auto* out = static_cast<uint8_t*>(buffer);
  if (Reactor::Current() != nullptr && impl_->TryReadHitAsync(offset, out, length, bypass, done)) {
    return;
  }
  impl_->Workers().Run({AsyncJob::kRead, offset, length, out, false, bypass, done});
}

void Engine::WriteAsync(uint64_t offset, const void* buffer, uint64_t length, bool fua,
                        EngineCompletion* done) {
  if (Status s = CheckRange(*impl_, offset, length); !s.ok()) return done->Done(s);
  if (Status s = RefuseIfMetadataFailed(*impl_); !s.ok()) return done->Done(s);
  impl_->stats.Taken();
  const bool bypass = impl_->BypassAndHeat(offset, length);
  // The workers only read from it: the cast fits the job's one buffer field.
  auto* in = const_cast<uint8_t*>(static_cast<const uint8_t*>(buffer));
  impl_->Workers().Run({AsyncJob::kWrite, offset, length, in, fua, bypass, done});
}

void Engine::Impl::DrainWorkers() {
  if (workers) workers->Drain();
}

void Engine::DiscardAsync(uint64_t offset, uint64_t length, EngineCompletion* done) {
  if (Status s = CheckRange(*impl_, offset, length); !s.ok()) return done->Done(s);
  impl_->stats.Taken();
  impl_->Workers().Run({AsyncJob::kDiscard, offset, length, nullptr, false, false, done});
}

void Engine::SyncAsync(EngineCompletion* done) {
  if (impl_->shut_down.load()) return done->Done(Status::Busy("the cache is shut down"));
  impl_->stats.Taken();
  impl_->Workers().Run({AsyncJob::kSync, 0, 0, nullptr, false, false, done});
}

}  // namespace cachecore
