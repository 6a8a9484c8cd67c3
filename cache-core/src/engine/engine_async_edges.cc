// Requests not in whole blocks (a client of 512-byte sectors), or in memory
// unfit for direct I/O, on the reactor. The whole blocks that cover the
// request go through a buffer of the request's own, as a request of their
// own served by the reactor's paths for whole blocks (a hit, a miss, a
// write-back or write-through write), whose answer comes back here: a
// read's bytes are copied out, and the caller is answered.
//
// A write with partial blocks is a read-modify-write: the bytes of those
// blocks it does not write must be what the volume holds, and stay so
// until its whole blocks are written, or a write to the rest of such a
// block in between would be lost. So it holds its lines' stripes
// exclusively first (parking on a busy one), reads those blocks' other
// bytes (from the cache when valid there, proven by their checksums; else
// from the origin, where only a holder of the stripe writes a block not
// valid in the cache; a trim discards the origin after
// letting its stripes go, and a block it trims may then read back as
// before, which a trim allows), copies the caller's bytes in, and hands the
// stripes to the whole-block write.
// A cached clean partial block that fails its checksum (or whose read failed) is
// read from the origin instead, the line still held. A partial block whose
// origin read failed cannot be completed: a write to the cache fails, a
// write to the origin takes only the caller's bytes. A whole-block write
// refused (lines that go each their own way, a line being cleaned, a failed
// store) lets the stripes go and runs again line by line, waits for the
// cleaning, or is answered.
#include <algorithm>
#include <cstring>

#include "cachecore/metadata/checksum.h"
#include "engine/engine_async.h"

namespace cachecore {

namespace {

bool HasPartialBlocks(const AsyncJob& j) { return j.offset % kBlockSize || j.length % kBlockSize; }

}  // namespace

bool Engine::Impl::TryEdgesAsync(const AsyncJob& job, size_t& busy) {
  const uint64_t begin = job.offset / kBlockSize * kBlockSize;
  const uint64_t end = (job.offset + job.length + kBlockSize - 1) / kBlockSize * kBlockSize;
  if (end - begin > kMaxOnReactor) return false;  // RunOnReactor splits such requests first
  AsyncState& state = Async();
  std::unique_ptr<AsyncEdges> e = state.edges.Take();
  e->im = this;
  e->reactor = Reactor::Current();
  e->job = job;
  e->begin = begin;
  e->end = end;
  e->bounce.Reserve(end - begin);
  AsyncJob whole{job.kind, begin, end - begin, e->bounce.data(), job.fua, job.bypass, e.get()};
  if (job.kind == AsyncJob::kWrite && HasPartialBlocks(job)) {
    SplitIntoSegments(begin, end - begin, e->segments);
    if (!TryHoldStripes(e->segments, e->stripes, /*exclusive=*/true, busy)) {
      state.edges.Give(std::move(e));
      return false;
    }
    PlanEdgeReads(*e);
    e->pending = e->ios.size() + 1;
    for (size_t i = 0; i < e->ios.size(); ++i) {
      (e->edges[i].from_cache ? *dev.cache : *dev.origin).Submit(e->ios[i]);
    }
    AsyncEdges& owned = *e.release();  // its completions' from here
    owned.IoDone(owned.ios.front());
    return true;
  }
  e->stripes.clear();
  if (job.kind == AsyncJob::kWrite) std::memcpy(e->bounce.data(), job.buffer, job.length);
  if (!TryWholeBlocksOnReactor(whole, busy)) {
    state.edges.Give(std::move(e));
    return false;
  }
  e.release();  // answered by the whole blocks' request
  return true;
}

// The partial blocks' reads, into their places in the buffer: from the
// cache where it holds the block, else from the origin.
void Engine::Impl::PlanEdgeReads(AsyncEdges& e) {
  e.ios.clear();
  e.edges.clear();
  auto read = [&](uint64_t block_offset) {
    const uint64_t line = block_offset / line_size;
    const uint32_t b = static_cast<uint32_t>(block_offset % line_size / kBlockSize);
    const std::optional<uint32_t> slot = slots.Find(line);
    const bool cached = slot && (slots.Flags(*slot, b) & kValid);
    e.ios.emplace_back();
    AsyncIo& io = e.ios.back();
    io.request = {IoOp::kRead, cached ? SlotOffset(*slot, b) : OriginOffset(line, b), kBlockSize,
                  e.bounce.data() + (block_offset - e.begin), Status()};
    io.done = &e;
    e.edges.push_back({cached, cached ? *slot : 0, b, line});
  };
  const uint64_t first = e.begin, last = e.end - kBlockSize;
  if (e.job.offset % kBlockSize) read(first);
  if ((e.job.offset + e.job.length) % kBlockSize && (last != first || e.job.offset % kBlockSize == 0)) {
    read(last);
  }
}

// As ProveReads for a write's partial blocks: failed reads counted; a
// dirty block the cache cannot give back fails the write; anything else not
// proven is a repair: a clean cached block read again from the origin, or a
// partial block whose origin read failed, not known (WriteWithUnreadEdges).
Engine::Impl::ReadProof Engine::Impl::ProveEdges(const AsyncEdges& e) {
  bool repair = false;
  for (const AsyncIo& io : e.ios) {
    if (io.request.status.ok()) continue;
    if (e.edges[&io - e.ios.data()].from_cache) {
      CountCacheError(stats.cache_read_err);
      continue;
    }
    LiveStats::Bump(stats.origin_read_err);
    repair = true;
  }
  for (size_t i = 0; i < e.ios.size(); ++i) {
    const AsyncEdges::Edge& edge = e.edges[i];
    const IoRequest& r = e.ios[i].request;
    if (!edge.from_cache) continue;
    const bool unread = !r.status.ok();
    if (CachedBlockProven(edge.slot, edge.block, static_cast<const uint8_t*>(r.buffer), unread)) continue;
    if (slots.Flags(edge.slot, edge.block) & kDirty) {
      return {ReadProof::kFailed, DirtyBlockLost(edge.line, edge.block, unread)};
    }
    repair = true;
  }
  return {repair ? ReadProof::kRepair : ReadProof::kProven, Status()};
}

// On the reactor, the partial blocks read, the stripes held.
void Engine::Impl::WriteWithEdges(AsyncEdges& e) {
  if (shut_down.load()) return EdgesElsewhere(e, /*by_line=*/false);
  ReadProof proof = ProveEdges(e);
  if (proof.kind == ReadProof::kFailed) return FailEdges(e, std::move(proof.status));
  if (proof.kind == ReadProof::kRepair && !RereadEdgesFromOrigin(e)) return WriteWithUnreadEdges(e);
  if (proof.kind == ReadProof::kRepair) return;  // back here once the origin's copies are in
  std::memcpy(e.bounce.data() + (e.job.offset - e.begin), e.job.buffer, e.job.length);
  const AsyncJob whole{AsyncJob::kWrite, e.begin, e.end - e.begin, e.bounce.data(), e.job.fua, e.job.bypass, &e};
  size_t busy = kNoStripe;  // the stripes are held: none is busy
  // Counted once the write takes the repaired blocks (refused, the request
  // starts over and counts them then); `e` may be answered before the call
  // returns.
  const uint64_t repaired = std::count_if(e.edges.begin(), e.edges.end(),
                                          [](const AsyncEdges::Edge& edge) { return edge.failed_checksum; });
  if (TryWholeBlocksOnReactor(whole, busy, &e.stripes)) {  // the stripes are the write's now
    if (repaired > 0) LiveStats::Bump(stats.checksum_repaired, repaired);
    return;
  }
  EdgesElsewhere(e, /*by_line=*/e.segments.size() > 1);
}

// When an origin read of a partial block failed: e.unread lists it, and
// every cached partial block not proven (clean: ProveEdges failed the
// write over a dirty one), whose bytes are not known either.
bool Engine::Impl::NoteUnreadEdges(AsyncEdges& e) {
  e.unread.clear();
  bool origin_failed = false;
  for (size_t i = 0; i < e.ios.size(); ++i) {
    origin_failed = origin_failed || (!e.edges[i].from_cache && !e.ios[i].request.status.ok());
  }
  if (!origin_failed) return false;
  for (size_t i = 0; i < e.ios.size(); ++i) {
    const AsyncEdges::Edge& edge = e.edges[i];
    const IoRequest& r = e.ios[i].request;
    const bool known = edge.from_cache ? CachedBlockProven(edge.slot, edge.block, static_cast<const uint8_t*>(r.buffer),
                                                           !r.status.ok())
                                       : r.status.ok();
    if (!known) e.unread.push_back(edge.line * line_size + edge.block * kBlockSize);
  }
  return true;
}

// Partial blocks whose origin reads failed (counted), in e.unread: their
// other bytes are not known. A write of one line whose blocks hold dirty
// data (which must go to the cache: dirty blocks are only there) fails with the
// origin's error, nothing written (over several lines, each line goes its
// own way);
// any other, in write-back too, writes only the caller's bytes to the
// origin, the cached copies of its other blocks
// updated and the unknown blocks dropped from the cache.
void Engine::Impl::WriteWithUnreadEdges(AsyncEdges& e) {
  if (EdgeWriteCoversDirtyData(e)) {
    // Over several lines each goes its own way (a dirty one fails alone).
    if (e.segments.size() > 1) return EdgesElsewhere(e, /*by_line=*/true);
    Status failed = Status::IoError("origin read failed");
    for (const AsyncIo& io : e.ios) {
      if (!io.request.status.ok()) failed = io.request.status;
    }
    return FailEdges(e, std::move(failed));
  }
  uint8_t* exact = e.bounce.data() + (e.job.offset - e.begin);  // as aligned as the offset
  std::memcpy(exact, e.job.buffer, e.job.length);
  const ExactOriginWrite write{e.job.offset, e.job.length, exact, e.unread};
  size_t busy = kNoStripe;  // the stripes are held: none is busy
  const bool around = e.job.bypass || EffectiveMode() == CacheMode::kWriteBack;  // takes no slot
  if (TryWriteThroughAsync(e.begin, e.bounce.data(), e.end - e.begin, e.job.fua, around, &e, busy,
                           &e.stripes, &write)) {
    return;  // the stripes are the write's now
  }
  EdgesElsewhere(e, /*by_line=*/e.segments.size() > 1);
}

// Nothing written: the stripes let go and the caller answered `failed`.
void Engine::Impl::FailEdges(AsyncEdges& e, Status failed) {
  ReleaseStripes(e.stripes, true);
  const AsyncJob job = e.job;
  async->edges.Give(std::unique_ptr<AsyncEdges>(&e));
  Answer(job.done, std::move(failed));
}

bool Engine::Impl::EdgeWriteCoversDirtyData(const AsyncEdges& e) {
  for (const Segment& seg : e.segments) {
    const std::optional<uint32_t> slot = slots.Find(seg.line);
    if (!slot) continue;
    for (uint32_t b = seg.first_block(); b < seg.end_block(); ++b) {
      if (slots.Flags(*slot, b) & kDirty) return true;
    }
  }
  return false;
}

// A clean partial block the cache could not prove is read from the origin
// instead (the whole-block write then writes all of it, with its
// checksum, as any write over a cached block does): only those reads are
// submitted again, the blocks proven stay in the buffer. False, with
// nothing submitted, when an origin read failed (e.unread then lists the
// blocks not known).
bool Engine::Impl::RereadEdgesFromOrigin(AsyncEdges& e) {
  if (NoteUnreadEdges(e)) return false;
  size_t kept = 0;
  for (size_t i = 0; i < e.ios.size(); ++i) {
    AsyncEdges::Edge edge = e.edges[i];
    IoRequest& r = e.ios[i].request;
    if (!edge.from_cache) continue;
    const bool unread = !r.status.ok();
    if (CachedBlockProven(edge.slot, edge.block, static_cast<const uint8_t*>(r.buffer), unread)) continue;
    void* buffer = r.buffer;
    edge.failed_checksum = !unread;
    edge.from_cache = false;
    e.edges[kept] = edge;
    e.ios[kept] = AsyncIo();  // nothing of the finished read's (a device's state) carries over
    e.ios[kept].request = {IoOp::kRead, OriginOffset(edge.line, edge.block), kBlockSize, buffer, Status()};
    e.ios[kept].done = &e;
    ++kept;
  }
  e.ios.resize(kept);
  e.edges.resize(kept);
  e.pending = kept + 1;
  for (AsyncIo& io : e.ios) dev.origin->Submit(io);
  e.IoDone(e.ios.front());
  return true;
}

// Nothing written, nothing counted, the stripes let go. With `by_line` (a
// whole-block write over several lines the reactor refused: its lines may
// need a victim each, or some go around the cache, which the reactor does
// one line at a time) it runs again line by line on the reactor, each line
// a read-modify-write of its own. Otherwise: after Shutdown answered as
// the synchronous calls are; a line being cleaned (whose origin write the
// cleaner's older copy could overtake) waited for, then started over; the
// rest as NotServedOnReactor says (a failed store; a mode switch under
// way).
void Engine::Impl::EdgesElsewhere(AsyncEdges& e, bool by_line) {
  const AsyncJob job = e.job;
  const uint64_t first = e.segments.empty() ? 0 : e.segments.front().line;
  const uint64_t last = e.segments.empty() ? 0 : e.segments.back().line;
  // Asked with the stripes still held: no cleaning of these lines begins
  // meanwhile, so a refusal for none is not taken for one.
  const bool cleaning = !e.segments.empty() && slots.AnyBeingCleaned(first, last);
  ReleaseStripes(e.stripes, true);
  async->edges.Give(std::unique_ptr<AsyncEdges>(&e));
  if (by_line) return SplitOnReactor(job, line_size);
  if (shut_down.load()) return Answer(job.done, Status::Busy("the cache is shut down"));
  if (cleaning && !dev.metadata->failed()) {
    ParkedRequest* parked = async->parked.Take().release();
    parked->im = this;
    parked->reactor = Reactor::Current();
    parked->job = job;
    return ParkWhileCleaning(*parked);
  }
  NotServedOnReactor(job);
}

void Engine::Impl::EdgesAnswered(AsyncEdges& e, Status status) {
  const AsyncJob job = e.job;
  if (status.ok() && job.kind == AsyncJob::kRead) {
    std::memcpy(job.buffer, e.bounce.data() + (job.offset - e.begin), job.length);
  }
  async->edges.Give(std::unique_ptr<AsyncEdges>(&e));
  job.done->Done(std::move(status));  // the whole blocks' answer was counted
}

}  // namespace cachecore
