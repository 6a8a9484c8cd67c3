// Reads that miss, on the reactor. A read of whole blocks in memory fit for
// direct I/O is served on the reactor that took it: its
// stripes tried exclusively; its cached runs read from the cache and its
// missing runs from the origin, all in flight at once; once they land the
// cached blocks proven by their checksums, the counts, and the missing
// blocks written into the cache from the caller's buffer; once those land,
// the blocks marked valid and clean, and the records put by the committer
// (a victim's delete ahead of its slot's new record), which lets the
// stripes go and answers. A line finding neither a free slot nor a clean
// victim is not promoted (no request cleans a dirty victim). A failed
// origin read, or a dirty block the cache cannot give back, fails the read
// on the reactor (counted); a clean block not proven is read from the
// origin, then dropped and promoted afresh.
#include <algorithm>

#include "cachecore/metadata/checksum.h"
#include "engine/engine_async.h"

namespace cachecore {

namespace {

constexpr uint32_t kNoSlot = SlotTable::kNoSlot;

// Adds one block to `ios` as part of `last` (an index, or -1) when it
// continues it both on the device and in memory; otherwise as a new request,
// whose index `last` becomes.
void AppendBlock(std::vector<AsyncIo>& ios, long& last, IoOp op, uint64_t offset, uint8_t* buffer) {
  if (last >= 0) {
    IoRequest& r = ios[last].request;
    if (r.offset + r.length == offset && static_cast<uint8_t*>(r.buffer) + r.length == buffer) {
      r.length += kBlockSize;
      return;
    }
  }
  ios.emplace_back();
  ios.back().request = {op, offset, kBlockSize, buffer, Status()};
  last = static_cast<long>(ios.size() - 1);
}

}  // namespace

bool Engine::Impl::TryReadMissAsync(uint64_t offset, uint8_t* out, uint64_t length, bool bypass,
                                    EngineCompletion* done, size_t& busy) {
  if (offset % kBlockSize || length % kBlockSize || length > kMaxOnReactor ||
      reinterpret_cast<uintptr_t>(out) % kSectorSize) {
    return false;
  }
  AsyncState& state = Async();
  std::unique_ptr<AsyncMiss> m = state.misses.Take();
  SplitIntoSegments(offset, length, m->segments);
  if (!TryHoldStripes(m->segments, m->stripes, /*exclusive=*/true, busy)) {
    state.misses.Give(std::move(m));
    return false;
  }
  m->slots.clear();
  slots.FindEach(m->segments.size(), [&m](size_t i) { return m->segments[i].line; }, m->slots);
  m->cached.clear();
  for (size_t i = 0; i < m->segments.size(); ++i) {
    for (uint32_t b = m->segments[i].first_block(); b < m->segments[i].end_block(); ++b) {
      m->cached.push_back(m->slots[i] != kNoSlot && (slots.Flags(m->slots[i], b) & kValid));
    }
  }
  m->promote = !bypass && EffectiveMode() != CacheMode::kPassThrough && !dev.metadata->failed();
  m->im = this;
  m->offset = offset;
  m->length = length;
  m->out = out;
  m->bypass = bypass;
  m->done = done;
  m->promoting = false;
  m->repairing = false;
  m->sync_records = false;
  m->repair.clear();
  m->repaired.clear();
  m->tally = {};
  m->promoted.clear();
  m->emptied.records.Clear();
  m->emptied.emptied.clear();
  PlanMissReads(*m);
  SubmitMissIos(*m.release());  // owned by its completions from here
  return true;
}

// Cached runs from the cache, missing runs from the origin (one read for a
// run that continues into the next line).
void Engine::Impl::PlanMissReads(AsyncMiss& m) {
  m.ios.clear();
  m.on_origin.clear();
  long last_cache = -1, last_origin = -1;
  size_t block = 0;
  for (size_t i = 0; i < m.segments.size(); ++i) {
    const Segment& seg = m.segments[i];
    for (uint32_t b = seg.first_block(); b < seg.end_block(); ++b, ++block) {
      uint8_t* dst = m.out + block * kBlockSize;
      const size_t before = m.ios.size();
      if (m.cached[block]) AppendBlock(m.ios, last_cache, IoOp::kRead, SlotOffset(m.slots[i], b), dst);
      else AppendBlock(m.ios, last_origin, IoOp::kRead, OriginOffset(seg.line, b), dst);
      if (m.ios.size() > before) m.on_origin.push_back(!m.cached[block]);
    }
  }
}

void Engine::Impl::SubmitMissIos(AsyncMiss& m) {
  for (AsyncIo& io : m.ios) io.done = &m;
  // One count more than the requests, dropped after the last is submitted:
  // a device that completes inline cannot finish the read under this loop.
  m.pending = m.ios.size() + 1;
  for (size_t k = 0; k < m.ios.size(); ++k) {
    BlockDevice* device = !m.promoting && m.on_origin[k] ? dev.origin : dev.cache;
    device->Submit(m.ios[k]);
  }
  m.IoDone(m.ios.front());
}

void Engine::Impl::MissLanded(AsyncMiss& m) {
  if (m.promoting) return PromotionLanded(m);
  if (!m.repairing) {
    // Cached blocks count as hits, repaired or not.
    m.tally.hits = std::count(m.cached.begin(), m.cached.end(), 1);
    m.tally.misses = m.cached.size() - m.tally.hits;
  }
  ReadProof proof = m.repairing ? RepairLanded(m)
                                : ProveReads(m.ios, &m.on_origin, m.segments, m.slots, &m.cached, m.out);
  if (proof.kind == ReadProof::kFailed) return FailMiss(m, std::move(proof.status));
  if (proof.kind == ReadProof::kRepair && StartRepair(m)) return;
  if (proof.kind == ReadProof::kProven && !m.repairing) FillRam(m);  // its cached blocks, its lines held
  slots.NoteHits(m.slots);
  if (m.promote && (m.tally.misses > 0 || !m.repaired.empty()) && PlanPromotion(m)) {
    m.promoting = true;
    return SubmitMissIos(m);
  }
  if (m.repaired.empty()) return Send(FinishMiss(m));
  // Dropped and not promoted again (a bypass, pass-through, a failed
  // store): their records say so before the stripes go.
  for (uint32_t slot : m.repaired) {
    if (std::find(m.promoted.begin(), m.promoted.end(), slot) == m.promoted.end()) m.promoted.push_back(slot);
  }
  for (uint32_t slot : m.promoted) slots.ReleaseIfEmpty(slot, m.emptied);
  async->committer.Commit(&m);  // the records, then FinishMiss
}

// Nothing changed (a repair drops its blocks only once the origin's copies
// are in), nothing counted but the errors and the read.
void Engine::Impl::FailMiss(AsyncMiss& m, Status status) {
  ReleaseStripes(m.stripes, true);
  CountReads(m.tally, m.offset);
  EngineCompletion* done = m.done;
  async->misses.Give(std::unique_ptr<AsyncMiss>(&m));
  Answer(done, std::move(status));
}

bool Engine::Impl::StartRepair(AsyncMiss& m) {
  m.repair.clear();
  size_t block = 0;
  for (size_t i = 0; i < m.segments.size(); ++i) {
    const Segment& seg = m.segments[i];
    for (uint32_t b = seg.first_block(); b < seg.end_block(); ++b, ++block) {
      if (!m.cached[block]) continue;
      const uint8_t* data = m.out + block * kBlockSize;
      const bool unread = ReadOfBlockFailed(m.ios, data);
      if (CachedBlockProven(m.slots[i], b, data, unread)) continue;
      m.repair.push_back({block, m.slots[i], b, !unread});
    }
  }
  if (m.repair.empty()) return false;  // ProveReads saw the same: cannot happen
  m.ios.clear();
  long last = -1;
  for (const AsyncMiss::Repair& r : m.repair) {  // the origin's copies (the request is whole blocks)
    AppendBlock(m.ios, last, IoOp::kRead, m.offset + r.block * kBlockSize, m.out + r.block * kBlockSize);
  }
  m.on_origin.assign(m.ios.size(), 1);
  m.repairing = true;
  SubmitMissIos(m);
  return true;
}

// The origin's copies are in: the blocks dropped from the cache, to be
// promoted afresh with the rest (their checksums now the origin's data's).
Engine::Impl::ReadProof Engine::Impl::RepairLanded(AsyncMiss& m) {
  m.repairing = false;
  const AsyncIo* failed = nullptr;
  for (const AsyncIo& io : m.ios) {
    if (io.request.status.ok()) continue;
    LiveStats::Bump(stats.origin_read_err);
    if (failed == nullptr) failed = &io;
  }
  if (failed != nullptr) return {ReadProof::kFailed, failed->request.status};  // nothing dropped
  for (const AsyncMiss::Repair& r : m.repair) {
    m.sync_records = m.sync_records || slots.IsStable(r.slot, r.index);
    slots.Invalidate(r.slot, r.index);
    m.cached[r.block] = 0;
    if (r.checksum) LiveStats::Bump(stats.checksum_repaired);
    if (std::find(m.repaired.begin(), m.repaired.end(), r.slot) == m.repaired.end()) m.repaired.push_back(r.slot);
  }
  return {ReadProof::kProven, Status()};
}

// The missing blocks' cache writes, from the caller's buffer, into the
// lines' slots (for a line that has none, if admitted, a free one or a
// clean victim's; with neither at hand the line is not promoted: a miss
// never waits for cleaning). False when there is nothing to write.
bool Engine::Impl::PlanPromotion(AsyncMiss& m) {
  m.ios.clear();
  long last = -1;
  size_t block = 0;
  for (size_t i = 0; i < m.segments.size(); ++i) {
    const Segment& seg = m.segments[i];
    const size_t first = block;
    block += seg.end_block() - seg.first_block();
    if (std::all_of(m.cached.begin() + first, m.cached.begin() + block, [](uint8_t c) { return c; })) continue;
    if (m.slots[i] == kNoSlot) {
      // A store that failed meanwhile takes no new line (nor evicts for one).
      if (dev.metadata->failed()) continue;
      if (!admission.AdmitOnMiss(seg.line)) continue;
      std::optional<uint32_t> slot = TakeSlotOnReactor(seg.line, m.stripes, m.segments, m.evictions);
      if (!slot) {
        LiveStats::Bump(stats.bypassed_no_space);  // no free slot nor clean victim at hand: not promoted
        continue;
      }
      m.slots[i] = *slot;
    }
    m.promoted.push_back(m.slots[i]);
    for (uint32_t b = seg.first_block(); b < seg.end_block(); ++b) {
      const size_t k = first + (b - seg.first_block());
      if (m.cached[k] || (slots.Flags(m.slots[i], b) & kValid)) continue;
      AppendBlock(m.ios, last, IoOp::kWrite, SlotOffset(m.slots[i], b), m.out + k * kBlockSize);
    }
  }
  return !m.ios.empty();
}

// Failures only cost the copies: the origin has the data.
void Engine::Impl::PromotionLanded(AsyncMiss& m) {
  const uint64_t epoch = slots.FlushesStarted();
  for (const AsyncIo& io : m.ios) MarkPromoted(io.request, epoch);
  for (uint32_t slot : m.promoted) slots.ReleaseIfEmpty(slot, m.emptied);
  async->committer.Commit(&m);  // the records, then FinishMiss
}

Engine::Impl::PendingAnswer Engine::Impl::FinishMiss(AsyncMiss& m) {
  if (!m.emptied.emptied.empty()) slots.FreeEmptied(m.emptied);  // their deletes are in the store now
  EndEvictions(m.evictions);
  ReleaseStripes(m.stripes, true);
  CountReads(m.tally, m.offset);
  PendingAnswer answer{m.done, Status::Ok(), false};
  async->misses.Give(std::unique_ptr<AsyncMiss>(&m));
  return answer;
}

}  // namespace cachecore
