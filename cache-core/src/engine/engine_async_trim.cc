// Trims on the reactor. A trim of at most kMaxOnReactor bytes is served on
// the reactor that took it, in DiscardRequest's order: its lines' stripes
// taken exclusively (parked when busy); the blocks it covers dropped from
// the cache (a dirty block it covers only in part is kept: cleaning
// rewrites it whole); the records put by the committer, and synced when
// dirty or stable data was dropped (it must stay dropped) or when the
// origin is trimmed next (its records must be gone for good before the
// origin changes under them); then the origin's discard, on the reactor
// (or the continuation thread, for a device whose discard waits), with the
// stripes still held, so that no write to those lines can land on
// the origin before it; then the stripes let go and the answer. A trim over
// a line being cleaned parks until the cleaning ends (the cleaner's older
// copy must land first), then starts over.
#include "engine/engine_async.h"

namespace cachecore {

namespace {
constexpr uint32_t kNoSlot = SlotTable::kNoSlot;
}  // namespace

bool Engine::Impl::TryTrimAsync(uint64_t offset, uint64_t length, EngineCompletion* done,
                                size_t& busy) {
  if (length > kMaxOnReactor || dev.metadata->failed()) return false;
  AsyncState& state = Async();
  std::unique_ptr<AsyncTrim> t = state.trims.Take();
  SplitIntoSegments(offset, length, t->segments);
  if (!TryHoldStripes(t->segments, t->stripes, /*exclusive=*/true, busy)) {
    state.trims.Give(std::move(t));
    return false;
  }
  ForgetInRam(t->segments);  // even if it goes another way: a copy forgotten is never wrong
  t->discard_origin = dev.origin->supports_discard();
  if (t->discard_origin && slots.AnyBeingCleaned(t->segments.front().line, t->segments.back().line)) {
    ReleaseStripes(t->stripes, true);  // parked until the cleaner's origin write has landed
    busy = kBusyCleaning;
    state.trims.Give(std::move(t));
    return false;
  }
  t->im = this;
  t->reactor = Reactor::Current();
  t->offset = offset;
  t->length = length;
  t->done = done;
  t->emptied.records.Clear();
  t->emptied.emptied.clear();
  t->sync = t->discard_origin;
  DropTrimmedBlocks(*t);
  if (t->slots.empty() && !t->discard_origin) {
    FinishTrim(*t.release(), Status::Ok());  // nothing cached, nothing to tell the origin
    return true;
  }
  state.committer.Commit(t.release());  // the records, then the origin's discard
  return true;
}

// The trim's drops, for every line of it that is cached: whole blocks
// dropped, dirty or not; a block covered in part dropped when clean (the
// origin's copy, discarded too, is then the only one) and kept when dirty
// (cleaning rewrites it whole).
void Engine::Impl::DropTrimmedBlocks(AsyncTrim& t) {
  t.slots.clear();
  slots.FindEach(t.segments.size(), [&t](size_t i) { return t.segments[i].line; }, t.slots);
  size_t kept = 0;
  for (size_t i = 0; i < t.segments.size(); ++i) {
    const Segment& seg = t.segments[i];
    const uint32_t slot = t.slots[i];
    if (slot == kNoSlot) continue;
    t.slots[kept++] = slot;
    for (uint32_t b = seg.first_block(); b < seg.end_block(); ++b) {
      const bool whole = b * kBlockSize >= seg.begin && (b + 1) * kBlockSize <= seg.end;
      const uint8_t f = slots.Flags(slot, b);
      if (!whole && (f & kDirty)) continue;
      t.sync = t.sync || (f & kDirty) || ((f & kValid) && slots.IsStable(slot, b));
      slots.Invalidate(slot, b);
    }
  }
  t.slots.resize(kept);
  for (uint32_t slot : t.slots) slots.ReleaseIfEmpty(slot, t.emptied);
}

void Engine::Impl::AddTrimRecords(AsyncTrim& t, MetadataStore::Batch& batch) {
  AddLineRecords(t.slots, t.emptied, batch, /*settle=*/false);  // the origin's discard may follow
}

Engine::Impl::PendingAnswer Engine::Impl::TrimCommitted(AsyncTrim& t, const Status& put) {
  if (!t.emptied.emptied.empty()) slots.FreeEmptied(t.emptied);  // their deletes are in the store now
  if (put.ok() && t.discard_origin) {
    // The origin's discard: back on its reactor, or where waiting for it
    // holds up no reactor (an io_uring device discards synchronously).
    if (dev.origin->discards_without_waiting()) t.reactor->Post(&t);
    else async->continuations.Run({AsyncJob::kContinue, 0, 0, nullptr, false, false, nullptr, &t});
    return {nullptr, Status::Ok(), false};
  }
  EngineCompletion* done = t.done;
  ReleaseStripes(t.stripes, true);
  async->trims.Give(std::unique_ptr<AsyncTrim>(&t));
  return {done, put, false};
}

void Engine::Impl::DiscardTrimmedOrigin(AsyncTrim& t) {
  t.io.request = {IoOp::kDiscard, t.offset, t.length, nullptr, Status()};
  t.io.done = &t;
  dev.origin->Submit(t.io);
}

void Engine::Impl::TrimDiscarded(AsyncTrim& t) {
  Status s = std::move(t.io.request.status);
  if (s.code() == StatusCode::kNotSupported) s = Status::Ok();  // a hint the origin may ignore
  if (!s.ok()) LiveStats::Bump(stats.origin_write_err);
  FinishTrim(t, std::move(s));
}

void Engine::Impl::FinishTrim(AsyncTrim& t, Status result) {
  EngineCompletion* done = t.done;
  ReleaseStripes(t.stripes, true);
  async->trims.Give(std::unique_ptr<AsyncTrim>(&t));
  Answer(done, std::move(result));
}

}  // namespace cachecore
