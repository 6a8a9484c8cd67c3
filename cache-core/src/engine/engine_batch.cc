// Requests over several lines, as batches: a read's cached runs and missing
// runs, and a write-back write's lines, each go out as one batch per device
// (submitted together, so the device runs them in parallel; a miss run that
// continues into the next line is one origin read), and their records as
// one metadata batch, instead of one serial I/O and one record per line.
// Anything unusual (a read error, a checksum that fails) leaves a read to
// the line-by-line path, which handles all of that.
#include <algorithm>

#include "cachecore/metadata/checksum.h"
#include "cachecore/engine/steps.h"
#include "engine/engine_impl.h"

namespace cachecore {

constexpr uint32_t kNoSlot = SlotTable::kNoSlot;

// The request's lines and where each lands in the caller's buffer; reused
// per thread, so the hot path allocates nothing after warm-up.
struct LineBatch {
  std::vector<Segment> segments;
  std::vector<uint64_t> at;      // byte offset of each segment in the request
  std::vector<uint32_t> slots;   // kNoSlot: not cached
  std::vector<size_t> stripes;   // sorted, unique
  std::vector<uint8_t> cached;   // per block of the request: valid in the cache
  std::vector<size_t> owner;     // write-back: the segment of each of `ios`
  std::vector<IoRequest> ios;
  std::vector<IoRequest> origin_ios;
};

namespace {

LineBatch& ThreadBatch() {
  thread_local LineBatch batch;
  batch.segments.clear();
  batch.at.clear();
  batch.slots.clear();
  batch.stripes.clear();
  batch.cached.clear();
  batch.owner.clear();
  batch.ios.clear();
  batch.origin_ios.clear();
  return batch;
}

uint32_t BlockCount(const Segment& seg) { return seg.end_block() - seg.first_block(); }

// Adds one block to `ios`, as part of the last request when it continues it
// both on the device and in memory.
void AppendBlock(std::vector<IoRequest>& ios, IoOp op, uint64_t offset, uint8_t* buffer) {
  if (!ios.empty()) {
    IoRequest& last = ios.back();
    if (last.offset + last.length == offset && static_cast<uint8_t*>(last.buffer) + last.length == buffer) {
      last.length += kBlockSize;
      return;
    }
  }
  ios.push_back({op, offset, kBlockSize, buffer, Status()});
}

// Whether every block of segment `i` (whose blocks start at `first` in the
// request) is cached.
bool AllCached(const LineBatch& b, size_t first, size_t i) {
  return std::all_of(b.cached.begin() + first, b.cached.begin() + first + BlockCount(b.segments[i]),
                     [](uint8_t c) { return c; });
}

}  // namespace

bool Engine::Impl::Batchable(uint64_t offset, const void* buffer, uint64_t length) const {
  // Only whole blocks in memory fit for direct I/O: the devices then move
  // the data straight from or into the caller's buffer.
  if (offset % kBlockSize || length % kBlockSize ||
      reinterpret_cast<uintptr_t>(buffer) % kSectorSize) {
    return false;
  }
  return offset / line_size != (offset + length - 1) / line_size;  // one line: nothing to batch
}

// Splits the request into `b`'s segments and takes their stripes in index
// order: two batches never wait on each other in a cycle, and everyone else
// only try_locks a second stripe. Reads each block's cached state.
void Engine::Impl::HoldLines(uint64_t offset, uint64_t length, LineBatch& b) {
  (void)ForEachSegment(offset, length, line_size, [&](const Segment& seg, uint64_t at) {
    b.segments.push_back(seg);
    b.at.push_back(at);
    b.stripes.push_back(StripeIndex(seg.line));
    return Status::Ok();
  });
  std::sort(b.stripes.begin(), b.stripes.end());
  b.stripes.erase(std::unique(b.stripes.begin(), b.stripes.end()), b.stripes.end());
  for (size_t s : b.stripes) stripes[s].lock();
  slots.FindEach(b.segments.size(), [&b](size_t i) { return b.segments[i].line; }, b.slots);
  for (size_t i = 0; i < b.segments.size(); ++i) {
    const Segment& seg = b.segments[i];
    for (uint32_t blk = seg.first_block(); blk < seg.end_block(); ++blk) {
      b.cached.push_back(b.slots[i] != kNoSlot && (slots.Flags(b.slots[i], blk) & kValid));
    }
  }
}

uint64_t Engine::Impl::NoteHits(const LineBatch& b, Tally& tally) {
  uint64_t hits = std::count(b.cached.begin(), b.cached.end(), 1);
  tally.hits += hits;
  tally.misses += b.cached.size() - hits;
  slots.NoteHits(b.slots);
  return hits;
}

void Engine::Impl::ReleaseLines(const LineBatch& b) {
  for (size_t s : b.stripes) stripes[s].unlock();
}

// A slot for segment `i`'s line while the batch holds its stripes: the
// victim is never one of the batch's own lines.
std::optional<uint32_t> Engine::Impl::AllocateInBatch(LineBatch& b, size_t i) {
  if (!admission.AdmitOnMiss(b.segments[i].line)) return std::nullopt;
  std::optional<uint32_t> slot = Allocate(b.segments[i].line, b.stripes, b.segments);
  if (slot) b.slots[i] = *slot;
  return slot;
}

bool Engine::Impl::ReadBatch(uint64_t offset, uint8_t* out, uint64_t length, bool bypass,
                             Tally& tally, Status& result) {
  if (!Batchable(offset, out, length)) return false;
  LineBatch& b = ThreadBatch();
  HoldLines(offset, length, b);
  // Cached runs from the cache; missing runs from the origin, one read for
  // a run that crosses into the next line.
  size_t block = 0;
  for (size_t i = 0; i < b.segments.size(); ++i) {
    const Segment& seg = b.segments[i];
    for (uint32_t blk = seg.first_block(); blk < seg.end_block(); ++blk, ++block) {
      uint8_t* dst = out + block * kBlockSize;
      if (b.cached[block]) AppendBlock(b.ios, IoOp::kRead, SlotOffset(b.slots[i], blk), dst);
      else AppendBlock(b.origin_ios, IoOp::kRead, OriginOffset(seg.line, blk), dst);
    }
  }
  bool ok = b.ios.empty() || dev.cache->SubmitAndWait(b.ios).ok();
  block = 0;
  for (size_t i = 0; ok && i < b.segments.size(); ++i) {
    const Segment& seg = b.segments[i];
    for (uint32_t blk = seg.first_block(); blk < seg.end_block() && ok; ++blk, ++block) {
      ok = !b.cached[block] ||
           Crc32c(out + block * kBlockSize, kBlockSize) == slots.Crc(b.slots[i], blk);
    }
  }
  if (!ok) {  // the line-by-line path repairs and reports
    ReleaseLines(b);
    return false;
  }
  const uint64_t hits = NoteHits(b, tally);
  result = b.origin_ios.empty() ? Status::Ok() : dev.origin->SubmitAndWait(b.origin_ios);
  if (!result.ok()) {  // as on the line-by-line path: the read fails, nothing is cached
    LiveStats::Bump(stats.origin_read_err);
    ReleaseLines(b);
    return true;
  }
  if (hits < b.cached.size() && !bypass && EffectiveMode() != CacheMode::kPassThrough &&
      !dev.metadata->failed()) {
    PromoteBatch(out, b);
  }
  ReleaseLines(b);
  return true;
}

// Copies the blocks a batched read fetched from the origin into the cache,
// one batch of writes and one of records. Failures only cost the copies.
void Engine::Impl::PromoteBatch(const uint8_t* data, LineBatch& b) {
  b.ios.clear();
  for (size_t i = 0, first = 0; i < b.segments.size(); first += BlockCount(b.segments[i]), ++i) {
    const Segment& seg = b.segments[i];
    if (AllCached(b, first, i) || (b.slots[i] == kNoSlot && !AllocateInBatch(b, i))) continue;
    for (uint32_t blk = seg.first_block(); blk < seg.end_block(); ++blk) {
      if (slots.Flags(b.slots[i], blk) & kValid) continue;
      const uint8_t* src = data + (first + blk - seg.first_block()) * kBlockSize;
      AppendBlock(b.ios, IoOp::kWrite, SlotOffset(b.slots[i], blk), const_cast<uint8_t*>(src));
    }
  }
  if (b.ios.empty()) return;
  (void)dev.cache->SubmitAndWait(b.ios);  // each write's own status counts below
  const uint64_t epoch = slots.FlushesStarted();
  for (const IoRequest& io : b.ios) MarkPromoted(io, epoch);
  RecordBatch records;
  for (size_t i = 0, first = 0; i < b.segments.size(); first += BlockCount(b.segments[i]), ++i) {
    if (b.slots[i] == kNoSlot || AllCached(b, first, i)) continue;
    if (slots.ValidBlocks(b.slots[i]) > 0) records.records.PutLine(b.slots[i], slots.BuildRecord(b.slots[i]));
    slots.ReleaseIfEmpty(b.slots[i], records);
  }
  if (!records.empty()) (void)Commit(records, false);
}

void Engine::Impl::MarkPromoted(const IoRequest& io, uint64_t epoch) {
  if (!io.status.ok()) return CountCacheError(stats.cache_write_err);
  for (uint64_t off = 0; off < io.length; off += kBlockSize) {
    const uint64_t at = io.offset + off - kDataOffset;  // a write may span adjacent slots
    slots.MarkValidClean(static_cast<uint32_t>(at / line_size), static_cast<uint32_t>(at % line_size / kBlockSize),
                         Crc32c(static_cast<const uint8_t*>(io.buffer) + off, kBlockSize), epoch);
  }
}

void Engine::Impl::MarkSegmentDirty(const Segment& seg, uint32_t slot, const uint8_t* data,
                                    uint64_t epoch) {
  for (uint32_t b = seg.first_block(); b < seg.end_block(); ++b) {
    const bool overwritten = (slots.Flags(slot, b) & (kDirty | kOverwritten)) == (kDirty | kOverwritten);
    slots.MarkDirty(slot, b, Crc32c(data + size_t{b - seg.first_block()} * kBlockSize, kBlockSize),
                    overwritten, epoch);
  }
}

// AnnounceOverwrite's first step for the whole batch: one cache-side flush
// when a block it rewrites is promised by a running sync but maybe not yet
// flushed. False when that flush failed (nothing is written then).
bool Engine::Impl::FlushBeforeAnnouncing(const LineBatch& b, uint64_t epoch) {
  for (size_t i = 0; i < b.segments.size(); ++i) {
    const Segment& seg = b.segments[i];
    if (b.slots[i] != kNoSlot &&
        slots.PromisedButUnflushed(b.slots[i], seg.first_block(), seg.end_block(), epoch)) {
      return FlushCacheSide().ok();
    }
  }
  return true;
}

bool Engine::Impl::WriteBackBatch(uint64_t offset, const uint8_t* in, uint64_t length, bool bypass,
                                  Tally& tally, Status& result) {
  if (bypass || EffectiveMode() != CacheMode::kWriteBack || !Batchable(offset, in, length)) return false;
  LineBatch& b = ThreadBatch();
  HoldLines(offset, length, b);
  // Held from the decisions to the records (see WriteBackSegment), and the
  // mode asked again once held (see WriteBackWanted): otherwise line by line.
  const WriteEpoch held(slots);
  if (EffectiveMode() != CacheMode::kWriteBack) {
    ReleaseLines(b);
    return false;
  }
  (void)NoteHits(b, tally);
  result = Status::Ok();
  auto keep_first_error = [&](Status s) {
    if (result.ok() && !s.ok()) result = std::move(s);
  };
  // Each line gets a slot (or, when none can be had, goes to the origin as
  // a single line would); what the batch overwrites is announced in one
  // synced metadata batch (see AnnounceOverwrite); then the data goes to
  // the cache in one batch.
  MetadataStore::Batch announcements;
  const uint64_t epoch = held.epoch();
  ReachedStep("write-back-0-epoch-held");  // a test point
  if (!FlushBeforeAnnouncing(b, epoch)) {
    keep_first_error(Status::IoError("the cache device failed a flush"));
    ReleaseLines(b);
    return true;
  }
  for (size_t i = 0; i < b.segments.size(); ++i) {
    const Segment& seg = b.segments[i];
    uint8_t* data = const_cast<uint8_t*>(in + b.at[i]);  // a write's data is only read from it
    if (b.slots[i] == kNoSlot && !AllocateInBatch(b, i)) {
      keep_first_error(ThroughSegment(seg, std::nullopt, data, CacheMode::kWriteAround, false));
      continue;
    }
    if (slots.MarkOverwrite(b.slots[i], seg.first_block(), seg.end_block(), false, epoch)) {
      announcements.PutLine(b.slots[i], slots.BuildRecord(b.slots[i]));
    }
    b.ios.push_back({IoOp::kWrite, SlotOffset(b.slots[i], seg.first_block()),
                     uint64_t{BlockCount(seg)} * kBlockSize, data, Status()});
    b.owner.push_back(i);
  }
  if (!announcements.empty()) {
    Status announced = ApplyRecords(announcements, true);
    if (!announced.ok()) {  // nothing of the cached lines is written
      keep_first_error(std::move(announced));
      ReleaseLines(b);
      return true;
    }
  }
  ReachedStep("write-back-1-decided");  // a test point
  if (!b.ios.empty()) (void)dev.cache->SubmitAndWait(b.ios);  // each write's own status counts below
  // The metadata only after the data, and the caller acknowledges after both.
  MetadataStore::Batch records;
  for (size_t k = 0; k < b.ios.size(); ++k) {
    const Segment& seg = b.segments[b.owner[k]];
    uint32_t slot = b.slots[b.owner[k]];
    const auto* data = static_cast<const uint8_t*>(b.ios[k].buffer);
    if (!b.ios[k].status.ok()) {
      keep_first_error(CacheWriteFailed(seg, slot, data, epoch, /*count=*/true));  // a write per segment
      continue;
    }
    MarkSegmentDirty(seg, slot, data, epoch);
    records.PutLine(slot, slots.BuildRecord(slot));
  }
  if (!records.empty()) {
    keep_first_error(ApplyRecords(records, false));
  }
  ReleaseLines(b);
  return true;
}

}  // namespace cachecore
