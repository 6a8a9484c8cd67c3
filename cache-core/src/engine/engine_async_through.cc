// Writes that go to the origin, on the reactor: write-through,
// write-around, read-only and pass-through writes, and writes that bypass
// the cache in write-back (sequential cutoff). A write of whole blocks in
// memory fit for direct I/O, over lines holding no dirty data in its blocks (those go to the
// cache whatever the mode: written back, the stripes handed over, or line
// by line when only some lines hold dirty data) and not being cleaned (the
// cleaner's older copy could land over it: it parks until the cleaning
// ends, and starts over), is
// served on the reactor that took it, in this order for all its lines at
// once:
//   1. announcements: a cached block a sync may promise as clean is marked
//      fresh, and its record put and synced before the origin changes
//      (rule 2), as is an eviction of one of its lines not yet synced; the
//      committer does both for every such write of its group with one sync;
//   2. one origin write from the caller's buffer;
//   3. the cached copies: rewritten with the new data (or dropped, in the
//      modes that keep no copy of written data, and after an origin error);
//      in write-through a line not cached takes a free slot or a clean
//      victim's, and is cached;
//   4. their records, put by the committer, which lets the stripes go and
//      answers (after a group commit, for FUA).
#include <algorithm>

#include "cachecore/metadata/checksum.h"
#include "cachecore/engine/steps.h"
#include "engine/engine_async.h"

namespace cachecore {

namespace {

constexpr uint32_t kNoSlot = SlotTable::kNoSlot;

bool KeepsCopies(CacheMode mode) {
  return mode == CacheMode::kWriteThrough || mode == CacheMode::kWriteAround ||
         mode == CacheMode::kWriteBack;
}

}  // namespace

bool Engine::Impl::TryWriteThroughAsync(uint64_t offset, const uint8_t* in, uint64_t length,
                                        bool fua, bool bypass, EngineCompletion* done,
                                        size_t& busy, const std::vector<size_t>* held,
                                        const ExactOriginWrite* exact) {
  const CacheMode mode = EffectiveMode();
  if ((mode == CacheMode::kWriteBack && !bypass) || dev.metadata->failed() ||
      offset % kBlockSize || length % kBlockSize ||
      length > kMaxOnReactor || reinterpret_cast<uintptr_t>(in) % kSectorSize) {
    return false;
  }
  AsyncState& state = Async();
  std::unique_ptr<AsyncThrough> t = state.throughs.Take();
  SplitIntoSegments(offset, length, t->segments);
  if (held != nullptr) {
    t->stripes = *held;
  } else if (!TryHoldStripes(t->segments, t->stripes, /*exclusive=*/true, busy)) {
    state.throughs.Give(std::move(t));
    return false;
  }
  ForgetInRam(t->segments);  // even if it goes another way: a copy forgotten is never wrong
  t->slots.clear();
  slots.FindEach(t->segments.size(), [&t](size_t i) { return t->segments[i].line; }, t->slots);
  t->tally = {};
  size_t dirty_segments = 0;
  for (size_t i = 0; i < t->segments.size(); ++i) {
    bool dirty = false;
    for (uint32_t b = t->segments[i].first_block(); b < t->segments[i].end_block(); ++b) {
      const uint8_t f = t->slots[i] == kNoSlot ? 0 : slots.Flags(t->slots[i], b);
      dirty = dirty || (f & kDirty);
      if (f & kValid) ++t->tally.hits;
      else ++t->tally.misses;
    }
    dirty_segments += dirty ? 1 : 0;
  }
  if (dirty_segments > 0) {
    // Dirty blocks are only on the cache: whatever the mode, a write to them
    // goes there (written to the origin, it would be undone when the
    // cache's older dirty copy is cleaned over it). With every line dirty it is written
    // back, the stripes handed over; with some, line by line, each line its
    // own way.
    const bool all = dirty_segments == t->segments.size();
    if (all && TryWriteBackAsync(offset, in, length, fua, bypass, done, busy, &t->stripes, /*dirty_lines=*/true)) {
      state.throughs.Give(std::move(t));
      return true;
    }
    if (held == nullptr) ReleaseStripes(t->stripes, true);
    const bool by_line = !all && held == nullptr;  // several lines, then
    state.throughs.Give(std::move(t));
    // Only read from: the cast fits the job's one buffer field.
    if (by_line) SplitOnReactor({AsyncJob::kWrite, offset, length, const_cast<uint8_t*>(in), fua, bypass, done}, line_size);
    return by_line;
  }
  if (slots.AnyBeingCleaned(t->segments.front().line, t->segments.back().line)) {
    // Its origin write must come after the cleaner's: parked until the
    // cleaning ends (stripes handed over stay the caller's, which lets them
    // go and parks the request: EdgesElsewhere).
    if (held == nullptr) {
      ReleaseStripes(t->stripes, true);
      busy = kBusyCleaning;
    }
    state.throughs.Give(std::move(t));
    return false;
  }
  NoteThroughHits(*t);
  t->im = this;
  t->reactor = Reactor::Current();
  t->offset = offset;
  t->length = length;
  t->in = in;
  t->origin_offset = exact != nullptr ? exact->offset : offset;
  t->origin_length = exact != nullptr ? exact->length : length;
  t->origin_in = exact != nullptr ? exact->in : in;
  t->unknown_blocks.clear();
  if (exact != nullptr) t->unknown_blocks.assign(exact->unknown_blocks.begin(), exact->unknown_blocks.end());
  t->fua = fua;
  t->keep_copies = KeepsCopies(mode);
  t->allocate = mode == CacheMode::kWriteThrough && !bypass;
  t->done = done;
  t->result = Status::Ok();
  t->emptied.records.Clear();
  t->emptied.emptied.clear();
  AnnounceThrough(*t.release());  // owned by its steps from here
  return true;
}

// The policy hears of a hit on a line with a valid block in the range.
void Engine::Impl::NoteThroughHits(AsyncThrough& t) {
  t.hit_slots.clear();
  for (size_t i = 0; i < t.segments.size(); ++i) {
    if (t.slots[i] == kNoSlot) continue;
    for (uint32_t b = t.segments[i].first_block(); b < t.segments[i].end_block(); ++b) {
      if (slots.Flags(t.slots[i], b) & kValid) {
        t.hit_slots.push_back(t.slots[i]);
        break;
      }
    }
  }
  slots.NoteHits(t.hit_slots);
}

// Step 1: what the origin write must wait for (MarkOverwrite with
// origin_write, SyncIfRecentlyEvicted); nothing to wait for, no detour.
// The records are built here, with the marks: built later, a sync that
// completed meanwhile would make the marked blocks stable again and the
// record call them clean while the origin takes the new data.
void Engine::Impl::AnnounceThrough(AsyncThrough& t) {
  const uint64_t epoch = slots.FlushesStarted();
  t.announced.clear();
  t.lines.clear();
  for (size_t i = 0; i < t.segments.size(); ++i) {
    t.lines.push_back(t.segments[i].line);
    const uint32_t slot = t.slots[i];
    if (slot != kNoSlot && slots.MarkOverwrite(slot, t.segments[i].first_block(), t.segments[i].end_block(),
                                               /*origin_write=*/true, epoch)) {
      t.announced.push_back(slot);
    }
  }
  t.sync_first = !t.announced.empty() || slots.AnyRecentlyEvicted(t.lines);
  if (!t.sync_first) return WriteThroughOrigin(t);
  t.announced_records.resize(t.announced.size());
  for (size_t k = 0; k < t.announced.size(); ++k) t.announced_records[k] = slots.BuildRecord(t.announced[k], false);
  t.phase = AsyncThrough::kAnnouncing;
  ReachedStep("through-0-waits-for-sync");  // a test point: the origin write waits
  async->committer.Commit(&t);  // then ThroughCommitted posts it back here
}

// Step 2, on the reactor.
void Engine::Impl::WriteThroughOrigin(AsyncThrough& t) {
  t.phase = AsyncThrough::kOrigin;
  t.ios.resize(1);
  // A write's data is only read from: the cast fits the request's one buffer field.
  t.ios[0].request = {IoOp::kWrite, t.origin_offset, t.origin_length, const_cast<uint8_t*>(t.origin_in), Status()};
  t.ios[0].done = &t;
  t.pending = 1;
  dev.origin->Submit(t.ios[0]);
}

void Engine::Impl::ThroughLanded(AsyncThrough& t) {
  if (t.phase == AsyncThrough::kCopies) return CopiesLanded(t);
  t.result = std::move(t.ios[0].request.status);
  if (!t.result.ok()) LiveStats::Bump(stats.origin_write_err);
  ReachedStep("through-1-origin-written");  // a test point
  WriteThroughCopies(t);
}

// Step 3: the cached blocks take the new data; in write-through (not
// bypassing) every block of the range is cached, in a line's slot or a
// new one (the request's blocks are whole: nothing to fill). After an
// origin error, or in a mode that keeps no copy of written data, the cached
// blocks are dropped: the cached copy may be older than the origin; so are
// blocks whose bytes are not all known, and a line holding one is not
// cached (no slot is taken for partial blocks). One cache write per run of
// blocks.
void Engine::Impl::WriteThroughCopies(AsyncThrough& t) {
  t.phase = AsyncThrough::kCopies;
  const bool keep = t.keep_copies && t.result.ok();
  t.ios.clear();
  t.copies.clear();
  const uint8_t* src = t.in;
  for (size_t i = 0; i < t.segments.size(); ++i) {
    const Segment& seg = t.segments[i];
    const uint8_t* seg_data = src;
    src += seg.end - seg.begin;
    const auto known = [&](uint32_t b) {
      const uint64_t at = seg.line * line_size + uint64_t{b} * kBlockSize;
      return std::find(t.unknown_blocks.begin(), t.unknown_blocks.end(), at) == t.unknown_blocks.end();
    };
    if (t.slots[i] == kNoSlot) {
      const bool whole_known = t.unknown_blocks.empty() ||
          (known(seg.first_block()) && known(seg.end_block() - 1));  // the unknown are at the edges
      if (!keep || !t.allocate || !whole_known || dev.metadata->failed() || !admission.AdmitOnMiss(seg.line)) continue;
      std::optional<uint32_t> slot = TakeSlotOnReactor(seg.line, t.stripes, t.segments, t.evictions);
      if (!slot) {
        LiveStats::Bump(stats.bypassed_no_space);  // no free slot nor clean victim at hand: not cached
        continue;
      }
      t.slots[i] = *slot;
    }
    const uint32_t slot = t.slots[i];
    for (uint32_t b = seg.first_block(); b < seg.end_block();) {
      if (!keep || !known(b)) {
        slots.Invalidate(slot, b++);
        continue;
      }
      const auto wanted = [&](uint32_t x) { return known(x) && (t.allocate || (slots.Flags(slot, x) & kValid)); };
      if (!wanted(b)) { ++b; continue; }
      uint32_t e = b + 1;
      while (e < seg.end_block() && wanted(e)) ++e;
      const uint8_t* run = seg_data + size_t{b - seg.first_block()} * kBlockSize;
      t.ios.emplace_back();
      t.ios.back().request = {IoOp::kWrite, SlotOffset(slot, b), uint64_t{e - b} * kBlockSize,
                              const_cast<uint8_t*>(run), Status()};
      t.ios.back().done = &t;
      t.copies.push_back({slot, b, e});
      b = e;
    }
  }
  if (t.ios.empty()) return CopiesLanded(t);
  SubmitAll(*dev.cache, t);
}

void Engine::Impl::CopiesLanded(AsyncThrough& t) {
  const uint64_t epoch = slots.FlushesStarted();
  for (size_t k = 0; k < t.ios.size(); ++k) {
    const AsyncThrough::Copy& c = t.copies[k];
    const auto* data = static_cast<const uint8_t*>(t.ios[k].request.buffer);
    if (!t.ios[k].request.status.ok()) {
      CountCacheError(stats.cache_write_err);  // the blocks are dropped; the origin has them
      for (uint32_t b = c.first; b < c.end; ++b) slots.Invalidate(c.slot, b);
      continue;
    }
    for (uint32_t b = c.first; b < c.end; ++b) {
      slots.MarkValidClean(c.slot, b, CheckOf(data + size_t{b - c.first} * kBlockSize, c.slot, b), epoch);
    }
  }
  for (uint32_t slot : t.slots) {
    if (slot != kNoSlot) slots.ReleaseIfEmpty(slot, t.emptied);
  }
  t.phase = AsyncThrough::kRecording;
  async->committer.Commit(&t);  // the records, then the answer
}

// The records a step puts: the announcements (step 1), or the victims'
// deletes ahead of the cached lines' records, and the deletes of slots left
// empty (step 4).
void Engine::Impl::AddThroughRecords(AsyncThrough& t, MetadataStore::Batch& batch) {
  if (t.phase == AsyncThrough::kAnnouncing) {
    for (size_t k = 0; k < t.announced.size(); ++k) batch.PutLine(t.announced[k], t.announced_records[k]);
    return;
  }
  t.evictions.AddDeletes(batch);  // ahead of their slots' new records
  AddLineRecords(t.slots, t.emptied, batch, /*settle=*/true);
}

Engine::Impl::PendingAnswer Engine::Impl::ThroughCommitted(AsyncThrough& t, const Status& put) {
  if (t.phase == AsyncThrough::kAnnouncing && put.ok()) {
    t.reactor->Post(&t);  // step 2, back on its reactor
    return {nullptr, Status::Ok(), false};
  }
  // Recorded (or an announcement failed: the origin was not written).
  Status result = t.phase == AsyncThrough::kAnnouncing ? put : std::move(t.result);
  if (result.ok() && !put.ok()) result = put;
  if (!t.emptied.emptied.empty()) slots.FreeEmptied(t.emptied);  // their deletes are in the store now
  EndEvictions(t.evictions);
  ReleaseStripes(t.stripes, true);
  CountWrites(t.tally, t.offset);
  PendingAnswer answer{t.done, std::move(result), t.fua};
  async->throughs.Give(std::unique_ptr<AsyncThrough>(&t));
  return answer;
}

}  // namespace cachecore
