// Write-back writes on the reactor. A write of whole blocks in memory fit
// for direct I/O is served on the reactor that took it: its stripes tried
// exclusively (parked on a busy one), its epoch entered; an announcement
// its blocks need (dirty data a sync may already promise) put and synced by
// the committer; its lines not cached placed (free slots for all, or one
// clean victim), after the announcement when there is one; its cache
// writes on the reactor's ring (adjacent lines in one), and once they land
// its blocks marked dirty and its records put (a victim's delete ahead of
// them). The same order holds: data,
// then record, then the answer. Lines that cannot be placed so send the
// write around the cache (none of its lines cached, and no room) or line
// by line, each line a request of its own; a failed cache write's rest
// goes to the continuation thread, a FUA write's group commit to the sync
// thread. Under a miss filter each line not cached decides in a request of
// its own (line by line).
#include <algorithm>

#include "cachecore/engine/steps.h"
#include "base/thread_name.h"
#include "engine/engine_async.h"

namespace cachecore {

namespace {

size_t CountNotCached(std::span<const uint32_t> slots) {
  return static_cast<size_t>(std::count(slots.begin(), slots.end(), SlotTable::kNoSlot));
}

}  // namespace

// A write-back write announces only what a running or completed sync may
// promise of a dirty block (SlotTable::MarkOverwrite with origin_write
// false): without one, MarkOverwrite would change nothing.
bool Engine::Impl::WritableWithoutAnnouncing(const AsyncWrite& w) const {
  for (size_t i = 0; i < w.segments.size(); ++i) {
    const Segment& seg = w.segments[i];
    if (w.slots[i] == SlotTable::kNoSlot) continue;  // nothing of it is cached
    for (uint32_t b = seg.first_block(); b < seg.end_block(); ++b) {
      const uint8_t f = slots.Flags(w.slots[i], b);
      if ((f & kValid) && (f & kDirty) && slots.MaybeStable(w.slots[i], b, w.epoch)) return false;
    }
  }
  return true;
}

// A slot for every line not cached: free slots for all of them, or for a
// single one a clean victim's (a single line under a miss filter only when
// admitted; several lines under it go line by line). All or
// nothing, so that a write that goes elsewhere leaves no slot taken; the
// policy hears of hits on the lines that were cached only when the write
// stays here. kNoSpace when no free or clean slot is at hand for them (for
// several lines: fewer free and clean ones in the whole cache than they
// need); kByLine when clean victims could be had for several lines (taken
// line by line, each line a request of its own); kNotAdmitted when the miss
// filter keeps its one line out (around the cache it goes).
Engine::Impl::Placement Engine::Impl::PlaceLines(AsyncWrite& w) {
  w.to_place.clear();
  for (size_t i = 0; i < w.segments.size(); ++i) {
    if (w.slots[i] == SlotTable::kNoSlot) w.to_place.push_back(i);
  }
  if (w.to_place.empty()) {
    slots.NoteHits(w.slots);
    return Placement::kPlaced;
  }
  if (!admission.AdmitsEveryMiss()) {
    // A miss filter records each miss once: a line not cached decides in a
    // request of its own.
    if (w.segments.size() > 1) return Placement::kByLine;
    if (!admission.AdmitOnMiss(w.segments[0].line)) return Placement::kNotAdmitted;
  }
  w.placed_lines.clear();
  for (size_t i : w.to_place) w.placed_lines.push_back(w.segments[i].line);
  w.placed_slots.clear();
  bool sync_due = false;
  if (slots.TakeFreeSlots(w.placed_lines, w.placed_slots, sync_due)) {
    QueueMetadataSyncIf(sync_due);
  } else if (w.to_place.size() == 1) {
    std::optional<uint32_t> slot = TakeSlotOnReactor(w.placed_lines[0], w.stripes, w.segments, w.evictions);
    if (!slot) return Placement::kNoSpace;
    w.placed_slots.push_back(*slot);
  } else {
    return RoomFor(w.to_place.size()) ? Placement::kByLine : Placement::kNoSpace;
  }
  slots.NoteHits(w.slots);  // of the lines cached before (kNoSlot entries are skipped)
  for (size_t k = 0; k < w.to_place.size(); ++k) w.slots[w.to_place[k]] = w.placed_slots[k];
  return Placement::kPlaced;
}

// One cache write per run of segments adjacent both in the cache and in
// the caller's buffer; io_of[i] says which carries segment i.
void Engine::Impl::PlanWrites(AsyncWrite& w) {
  w.ios.clear();
  w.io_of.clear();
  const uint8_t* src = w.in;
  for (size_t i = 0; i < w.segments.size(); ++i) {
    const Segment& seg = w.segments[i];
    const uint64_t at = SlotOffset(w.slots[i], seg.first_block());
    const uint64_t bytes = uint64_t{seg.end - seg.begin};
    if (!w.ios.empty()) {
      IoRequest& last = w.ios.back().request;
      if (last.offset + last.length == at) {
        last.length += bytes;
        w.io_of.push_back(static_cast<uint32_t>(w.ios.size() - 1));
        src += bytes;
        continue;
      }
    }
    w.ios.emplace_back();
    // A write's data is only read from: the cast fits the request's one buffer field.
    w.ios.back().request = {IoOp::kWrite, at, bytes, const_cast<uint8_t*>(src), Status()};
    w.ios.back().done = &w;
    w.io_of.push_back(static_cast<uint32_t>(w.ios.size() - 1));
    src += bytes;
  }
}

bool Engine::Impl::TryWriteBackAsync(uint64_t offset, const uint8_t* in, uint64_t length, bool fua,
                                     bool bypass, EngineCompletion* done, size_t& busy,
                                     const std::vector<size_t>* held, bool dirty_lines) {
  if ((!dirty_lines && (bypass || EffectiveMode() != CacheMode::kWriteBack)) || dev.metadata->failed() ||
      offset % kBlockSize || length % kBlockSize || length > kMaxOnReactor ||
      reinterpret_cast<uintptr_t>(in) % kSectorSize) {
    return false;
  }
  AsyncState& state = Async();
  std::unique_ptr<AsyncWrite> w = state.writes.Take();
  SplitIntoSegments(offset, length, w->segments);
  if (held != nullptr) {
    w->stripes = *held;
  } else if (!TryHoldStripes(w->segments, w->stripes, /*exclusive=*/true, busy)) {
    state.writes.Give(std::move(w));
    return false;
  }
  ForgetInRam(w->segments);  // even if it goes another way: a copy forgotten is never wrong
  w->slots.clear();
  slots.FindEach(w->segments.size(), [&w](size_t i) { return w->segments[i].line; }, w->slots);
  // Held from the decision to the records: a sync that begins meanwhile
  // waits, and covers this write whole (see SlotTable::EnterWrite).
  w->epoch = slots.EnterWrite();
  // The mode again once the epoch is held: SetMode's sync waits for writes
  // that hold one, so a write that saw write-back and enters its epoch
  // after the switch goes through instead of making a line dirty behind
  // the switch's flush (ModeSwitchTest). A write
  // that announces places its lines once announced, back on its reactor (a
  // failed announcement would leave new slots and their victims half done);
  // one whose stripes were handed over does not (if they could not be
  // placed then, its whole blocks would be written with the stripes let go
  // in between): it goes line by line from the start (EdgesElsewhere).
  const size_t not_cached = CountNotCached(w->slots);
  w->place_later = not_cached > 0 && !WritableWithoutAnnouncing(*w);
  Placement placed = Placement::kElsewhere;
  if (dirty_lines || EffectiveMode() == CacheMode::kWriteBack) {
    if (!w->place_later) placed = PlaceLines(*w);
    else if (held != nullptr) placed = Placement::kElsewhere;
    else if (!admission.AdmitsEveryMiss()) placed = Placement::kByLine;
    // Once announced, several lines are placed only in free slots (as
    // PlaceLines does): without enough of them, line by line at once, not
    // after an announcement made for nothing.
    else if (not_cached > 1 && slots.FreeSlots() < not_cached) placed = RoomFor(not_cached) ? Placement::kByLine : Placement::kNoSpace;
    else placed = RoomFor(not_cached) ? Placement::kPlaced : Placement::kNoSpace;  // once announced
  }
  if (placed != Placement::kPlaced) {
    slots.LeaveWrite(w->epoch);
    // No line of it cached, and no room for them: around the cache. A line
    // of it still being cleaned (which a trim over an origin without
    // discard can leave uncached) refuses that: its origin write must come
    // after the cleaner's, so the request parks until the cleaning ends.
    const bool around = (placed == Placement::kNoSpace || placed == Placement::kNotAdmitted) &&
                        not_cached == w->segments.size();
    if (around && TryWriteThroughAsync(offset, in, length, fua, /*bypass=*/true, done, busy, &w->stripes)) {
      if (placed == Placement::kNoSpace) LiveStats::Bump(stats.bypassed_no_space, w->segments.size());
      state.writes.Give(std::move(w));
      return true;  // the stripes are the write-around's now
    }
    if (around && held == nullptr &&
        slots.AnyBeingCleaned(w->segments.front().line, w->segments.back().line)) {
      ReleaseStripes(w->stripes, true);
      state.writes.Give(std::move(w));
      busy = kBusyCleaning;
      return false;
    }
    if (held == nullptr) ReleaseStripes(w->stripes, true);
    const bool by_line = held == nullptr && w->segments.size() > 1 &&
                         (placed == Placement::kNoSpace || placed == Placement::kByLine);
    state.writes.Give(std::move(w));
    // Each line its own way (placed, or around the cache), each a request.
    // Only read from: the cast fits the job's one buffer field.
    if (by_line) SplitOnReactor({AsyncJob::kWrite, offset, length, const_cast<uint8_t*>(in), fua, bypass, done}, line_size);
    return by_line;
  }
  ReachedStep("write-back-0-epoch-held");  // a test point
  w->im = this;
  w->offset = offset;
  w->length = length;
  w->in = in;
  w->fua = fua;
  w->done = done;
  w->tally = {};
  for (size_t i = 0; i < w->segments.size(); ++i) {
    for (uint32_t b = w->segments[i].first_block(); b < w->segments[i].end_block(); ++b) {
      if (w->slots[i] != SlotTable::kNoSlot && (slots.Flags(w->slots[i], b) & kValid)) ++w->tally.hits;
      else ++w->tally.misses;
    }
  }
  w->announcing = PlanAnnouncements(*w);
  ReachedStep("write-back-1-decided");  // a test point
  if (w->announcing) {
    w->resume.w = w.get();
    w->resume.reactor = Reactor::Current();
    state.committer.Commit(w.release());  // then WriteBackCommitted posts it back here
    return true;
  }
  SubmitWriteBack(*w.release());  // owned by its completions from here
  return true;
}

bool Engine::Impl::PlanAnnouncements(AsyncWrite& w) {
  if (WritableWithoutAnnouncing(w)) return false;
  w.flush_first = false;
  for (size_t i = 0; i < w.segments.size(); ++i) {
    const Segment& seg = w.segments[i];
    if (w.slots[i] == SlotTable::kNoSlot) continue;  // placed once announced
    w.flush_first = w.flush_first ||
                    slots.PromisedButUnflushed(w.slots[i], seg.first_block(), seg.end_block(), w.epoch);
  }
  return true;
}

// On the committer, once the cache side is flushed when it had to be (the
// write's stripes and epoch held): AnnounceOverwrite's marks and records.
// Marked on the reactor, a failed flush left the marks behind, and a later
// write in the epoch rewrote the block unannounced while a running sync
// promised its older data.
void Engine::Impl::MarkAnnouncements(AsyncWrite& w, MetadataStore::Batch& batch) {
  for (size_t i = 0; i < w.segments.size(); ++i) {
    const Segment& seg = w.segments[i];
    if (w.slots[i] == SlotTable::kNoSlot) continue;  // placed once announced
    if (slots.MarkOverwrite(w.slots[i], seg.first_block(), seg.end_block(), /*origin_write=*/false, w.epoch)) {
      batch.PutLine(w.slots[i], slots.BuildRecord(w.slots[i], false));  // ahead of the write
    }
  }
}

void Engine::Impl::SubmitWriteBack(AsyncWrite& w) {
  w.announcing = false;
  if (w.place_later) {
    // The cache may have failed, or its store, while the write announced.
    if (shut_down.load() || EffectiveMode() != CacheMode::kWriteBack || dev.metadata->failed()) {
      return WriteBackAgain(w, /*by_line=*/false);
    }
    if (PlaceLines(w) != Placement::kPlaced) return WriteBackAgain(w, /*by_line=*/true);
  }
  PlanWrites(w);
  SubmitAll(*dev.cache, w);
}

// Announced, but its lines cannot all be placed now: nothing written,
// nothing counted (the marks stay: a block marked overwritten that is not
// rewritten still holds its own data). The request runs again on its
// reactor, line by line (each line placed or written around the cache), or
// whole (the cache shut down, its store failed or its mode changed while
// the write announced: answered so, or written as the mode now says).
void Engine::Impl::WriteBackAgain(AsyncWrite& w, bool by_line) {
  slots.LeaveWrite(w.epoch);
  ReleaseStripes(w.stripes, true);
  // Only read from: the cast fits the job's one buffer field.
  const AsyncJob job{AsyncJob::kWrite, w.offset, w.length, const_cast<uint8_t*>(w.in), w.fua, false, w.done};
  async->writes.Give(std::unique_ptr<AsyncWrite>(&w));
  if (by_line) return SplitOnReactor(job, line_size);
  RunOnReactor(job, nullptr);
}

bool Engine::Impl::RoomFor(size_t lines) {
  const uint64_t cached = stats.occupancy_lines.load(std::memory_order_relaxed);
  const uint64_t clean = cached - std::min(cached, stats.dirty_lines.load(std::memory_order_relaxed));
  return slots.FreeSlots() + clean >= lines;
}

Engine::Impl::PendingAnswer Engine::Impl::WriteBackCommitted(AsyncWrite& w, const Status& put) {
  if (w.announcing && put.ok()) {
    w.resume.reactor->Post(&w.resume);  // the data, back on its reactor
    return {nullptr, Status::Ok(), false};
  }
  return ReleaseWrite(w, put);  // recorded, or the announcement failed (nothing written)
}

void Engine::Impl::WriteBackLanded(AsyncWrite& w) {
  for (const AsyncIo& io : w.ios) {
    if (!io.request.status.ok()) {
      // Its data goes to the origin, durably: that blocks.
      Async().continuations.Run({AsyncJob::kContinue, 0, 0, nullptr, false, false, nullptr, &w});
      return;
    }
  }
  const uint8_t* data = w.in;
  for (size_t i = 0; i < w.segments.size(); ++i) {
    MarkSegmentDirty(w.segments[i], w.slots[i], data, w.epoch);
    data += w.segments[i].end - w.segments[i].begin;
  }
  async->committer.Commit(&w);  // the records, then the answer
}

// A write one of whose cache writes failed, on the continuation thread.
void Engine::Impl::FinishWriteBack(AsyncWrite& w) {
  if (!w.evictions.empty()) {
    // The victims' deletes first: a slot this write leaves empty is freed
    // below, and a late delete would remove its next line's record.
    MetadataStore::Batch deletes;
    w.evictions.AddDeletes(deletes);
    (void)ApplyRecords(deletes, false);  // counted; the slots are this write's either way
    EndEvictions(w.evictions);
  }
  Status result = Status::Ok();
  MetadataStore::Batch records;
  const uint8_t* data = w.in;
  for (size_t i = 0; i < w.segments.size(); ++i) {
    const Segment& seg = w.segments[i];
    const uint8_t* seg_data = data;
    data += seg.end - seg.begin;
    if (!w.ios[w.io_of[i]].request.status.ok()) {
      // One error per failed write: a write covers a run of segments.
      const bool first_of_write = i == 0 || w.io_of[i - 1] != w.io_of[i];
      Status failed = CacheWriteFailed(seg, w.slots[i], seg_data, w.epoch, first_of_write);
      if (result.ok()) result = std::move(failed);
      continue;
    }
    MarkSegmentDirty(seg, w.slots[i], seg_data, w.epoch);
    records.PutLine(w.slots[i], slots.BuildRecord(w.slots[i], true));
  }
  if (!records.empty()) {
    Status put = ApplyRecords(records, false);
    if (result.ok()) result = std::move(put);
  }
  Send(ReleaseWrite(w, std::move(result)));
}

Engine::Impl::PendingAnswer Engine::Impl::ReleaseWrite(AsyncWrite& w, Status result) {
  slots.LeaveWrite(w.epoch);
  EndEvictions(w.evictions);
  ReleaseStripes(w.stripes, true);
  CountWrites(w.tally, w.offset);
  PendingAnswer answer{w.done, std::move(result), w.fua};
  async->writes.Give(std::unique_ptr<AsyncWrite>(&w));
  return answer;
}

void Engine::Impl::Send(PendingAnswer answer) {
  if (answer.fua && answer.status.ok()) return GroupSyncAsync(answer.done);  // answered once a sync covered it
  Answer(answer.done, std::move(answer.status));
}

// ---- the record committer

RecordCommitter::RecordCommitter(Engine::Impl& im) : im_(im), thread_([this] { Loop(); }) {}

void RecordCommitter::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RecordCommitter::Commit(CommitJob* job) {
  bool wake;
  {
    MutexLock lock(mu_);
    wake = queue_.empty();  // otherwise the committer is awake already, or about to be
    queue_.push_back(job);
  }
  if (wake) cv_.notify_one();
}

void RecordCommitter::Drain() {
  MutexLock lock(mu_);
  lock.Wait(idle_cv_, [this] {
    mu_.AssertHeld();
    return queue_.empty() && !busy_;
  });
}

void RecordCommitter::Loop() {
  NameThisThread("cachectl-record");
  MutexLock lock(mu_);
  while (true) {
    lock.Wait(cv_, [this] {
      mu_.AssertHeld();
      return stop_ || !queue_.empty();
    });
    if (queue_.empty()) return;  // stopping, and nothing left
    group_.swap(queue_);
    busy_ = true;
    lock.Unlock();
    CommitGroup();
    lock.Lock();
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

// Each request still holds its lines' stripes: their state is read here as
// its reactor left it (handed over under mu_).
void RecordCommitter::CommitGroup() {
  bool sync = false, flush = false;
  for (CommitJob* job : group_) {
    sync = sync || job->NeedsSync();
    flush = flush || job->NeedsCacheFlush();
  }
  // Before any record promising data that a running sync may not have
  // flushed yet (AnnounceOverwrite's first step), once for the group.
  const Status flushed = flush ? im_.FlushCacheSide() : Status::Ok();
  records_.Clear();
  for (CommitJob* job : group_) {
    if (flushed.ok() || !job->NeedsCacheFlush()) job->AddRecords(records_);
  }
  const Status put = records_.empty() ? Status::Ok() : im_.ApplyRecords(records_, false);
  // One sync for every announcement of the group (and the evictions listed
  // before it): grouped, as concurrent flushes are.
  const Status synced = put.ok() && sync ? im_.SyncMetadata() : put;
  // Every request lets go of its lines before any is answered: a client's
  // completion may take its time, or ask for those lines.
  for (CommitJob* job : group_) {
    const bool unflushed = !flushed.ok() && job->NeedsCacheFlush();
    answers_.push_back(job->Committed(unflushed ? flushed : job->NeedsSync() ? synced : put));
  }
  for (Engine::Impl::PendingAnswer& a : answers_) {
    if (a.done != nullptr) im_.Send(std::move(a));
  }
  answers_.clear();
  group_.clear();
}

}  // namespace cachecore
