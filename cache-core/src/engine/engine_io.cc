// The I/O paths: how a read, a write and a discard move through the cache.
// Each request is split into line segments; a segment holds its line's
// stripe for its I/O, so two requests on one line never interleave.
#include <algorithm>
#include <bitset>
#include <cstring>

#include "cachecore/metadata/checksum.h"
#include "cachecore/engine/steps.h"
#include "engine/engine_impl.h"

namespace cachecore {

namespace {

// Per-thread staging: a block-aligned copy of a segment, reused, so the hot
// path allocates nothing after warm-up.
uint8_t* SegmentWindow(size_t bytes) {
  thread_local AlignedBuffer window;
  window.Reserve(bytes);
  return window.data();
}

// The block-aligned buffer a segment's I/O uses: the client's own memory
// when the segment is whole blocks and the buffer suits direct I/O (no copy
// at all), the thread's staging window otherwise.
uint8_t* WindowFor(const Segment& seg, const uint8_t* client) {
  if (seg.block_aligned() && reinterpret_cast<uintptr_t>(client) % kSectorSize == 0) {
    return const_cast<uint8_t*>(client);  // a write's data is only read from it
  }
  return SegmentWindow(size_t{seg.end_block() - seg.first_block()} * kBlockSize);
}

uint8_t* EdgeBuffer() {
  thread_local AlignedBuffer edge(kBlockSize);
  return edge.data();
}

uint32_t BlockCrc(const uint8_t* window, uint32_t index) {
  return Crc32c(window + size_t{index} * kBlockSize, kBlockSize);
}

}  // namespace

bool Engine::Impl::CachedBlockProven(uint32_t slot, uint32_t block, const uint8_t* data, bool unread) const {
  return !unread && Crc32c(data, kBlockSize) == slots.Crc(slot, block);
}

Status Engine::Impl::DirtyBlockLost(uint64_t line, uint32_t block, bool unread) {
  if (!unread) LiveStats::Bump(stats.checksum_failed);
  return Status::IoError("dirty block at origin offset " + std::to_string(OriginOffset(line, block)) +
                         (unread ? " cannot be read from the cache" : " fails its checksum"));
}

Status Engine::Impl::ReadCachedBlocks(uint64_t line, uint32_t slot, uint32_t b0, uint32_t b1,
                                      uint8_t* dst) {
  Status s = dev.cache->Read(SlotOffset(slot, b0), dst, uint64_t{b1 - b0} * kBlockSize);
  if (!s.ok()) CountCacheError(stats.cache_read_err);
  bool repaired = false, stable_changed = false;
  for (uint32_t b = b0; b < b1; ++b) {
    uint8_t* block = dst + size_t{b - b0} * kBlockSize;
    if (CachedBlockProven(slot, b, block, !s.ok())) continue;
    if (slots.Flags(slot, b) & kDirty) return DirtyBlockLost(line, b, !s.ok());
    // A clean block: the origin has the data.
    Status o = dev.origin->Read(OriginOffset(line, b), block, kBlockSize);
    if (!o.ok()) {
      LiveStats::Bump(stats.origin_read_err);
      return o;
    }
    stable_changed = stable_changed || slots.IsStable(slot, b);
    if (!s.ok()) {
      slots.Invalidate(slot, b);  // the cache device failed here; do not trust it
      repaired = true;
      continue;
    }
    LiveStats::Bump(stats.checksum_repaired);
    if (dev.cache->Write(SlotOffset(slot, b), block, kBlockSize).ok()) {
      slots.MarkValidClean(slot, b, Crc32c(block, kBlockSize), slots.FlushesStarted());
    } else {
      CountCacheError(stats.cache_write_err);
      slots.Invalidate(slot, b);
    }
    repaired = true;
  }
  // A stable clean block that changed keeps its durable kClean record until
  // the new one is synced; a write-back write over it meanwhile would not
  // know to sync before cleaning (rule 3: MarkDirty sees no clean block).
  if (repaired) (void)PutRecord(slot, stable_changed);  // counted; the read itself is served
  return Status::Ok();
}

Status Engine::Impl::ReadSegment(const Segment& seg, uint8_t* out, bool bypass, Tally& tally) {
  std::lock_guard cell(StripeOf(seg.line));
  const uint32_t b0 = seg.first_block(), b1 = seg.end_block();
  uint8_t* window = WindowFor(seg, out);
  std::optional<uint32_t> slot = slots.Lookup(seg.line, b0, b1);
  std::bitset<256> hit;
  for (uint32_t b = b0; b < b1; ++b) hit[b - b0] = slot && (slots.Flags(*slot, b) & kValid);
  uint64_t hits = hit.count(), misses = (b1 - b0) - hits;
  tally.hits += hits;
  tally.misses += misses;

  // Runs of hits come from the cache, runs of misses from the origin.
  for (uint32_t b = b0; b < b1;) {
    uint32_t e = b + 1;
    while (e < b1 && hit[e - b0] == hit[b - b0]) ++e;
    uint8_t* dst = window + size_t{b - b0} * kBlockSize;
    if (hit[b - b0]) {
      CACHECORE_RETURN_IF_ERROR(ReadCachedBlocks(seg.line, *slot, b, e, dst));
    } else {
      Status s = dev.origin->Read(OriginOffset(seg.line, b), dst, uint64_t{e - b} * kBlockSize);
      if (!s.ok()) {
        LiveStats::Bump(stats.origin_read_err);
        return s;
      }
    }
    b = e;
  }

  CacheMode mode = EffectiveMode();
  bool promote = misses > 0 && !bypass && mode != CacheMode::kPassThrough &&
                 !dev.metadata->failed() && admission.AdmitOnMiss(seg.line);
  if (promote && !slot) slot = Allocate(seg.line);
  if (promote && slot) {
    bool changed = false;
    for (uint32_t b = b0; b < b1;) {
      if (hit[b - b0] || (slots.Flags(*slot, b) & kValid)) { ++b; continue; }
      uint32_t e = b + 1;
      while (e < b1 && !hit[e - b0]) ++e;
      const uint8_t* src = window + size_t{b - b0} * kBlockSize;
      if (dev.cache->Write(SlotOffset(*slot, b), src, uint64_t{e - b} * kBlockSize).ok()) {
        uint64_t epoch = slots.FlushesStarted();
        for (uint32_t x = b; x < e; ++x) slots.MarkValidClean(*slot, x, BlockCrc(window, x - b0), epoch);
        changed = true;
      } else {
        CountCacheError(stats.cache_write_err);
      }
      b = e;
    }
    if (changed) (void)PutRecord(*slot, false);  // counted; clean blocks, the origin has them
    RecordBatch batch;
    slots.ReleaseIfEmpty(*slot, batch);
    if (!batch.empty()) (void)Commit(batch, false);
  }
  if (window != out) std::memcpy(out, window + (seg.begin - size_t{b0} * kBlockSize), seg.end - seg.begin);
  return Status::Ok();
}

Status Engine::Impl::FillEdges(const Segment& seg, std::optional<uint32_t> slot, uint8_t* window) {
  const uint32_t b0 = seg.first_block(), b1 = seg.end_block();
  auto fill = [&](uint32_t b) -> Status {
    uint8_t* edge = EdgeBuffer();
    if (slot && (slots.Flags(*slot, b) & kValid)) {
      CACHECORE_RETURN_IF_ERROR(ReadCachedBlocks(seg.line, *slot, b, b + 1, edge));
    } else {
      Status s = dev.origin->Read(OriginOffset(seg.line, b), edge, kBlockSize);
      if (!s.ok()) {
        LiveStats::Bump(stats.origin_read_err);
        return s;
      }
    }
    // Keep the request's bytes; take the rest of the block from `edge`.
    uint32_t block_begin = b * kBlockSize, block_end = block_begin + kBlockSize;
    uint8_t* dst = window + size_t{b - b0} * kBlockSize;
    if (seg.begin > block_begin) std::memcpy(dst, edge, seg.begin - block_begin);
    if (seg.end < block_end) {
      std::memcpy(dst + (seg.end - block_begin), edge + (seg.end - block_begin), block_end - seg.end);
    }
    return Status::Ok();
  };
  if (seg.begin % kBlockSize != 0) CACHECORE_RETURN_IF_ERROR(fill(b0));
  if (seg.end % kBlockSize != 0 && (b1 - 1 != b0 || seg.begin % kBlockSize == 0)) {
    CACHECORE_RETURN_IF_ERROR(fill(b1 - 1));
  }
  return Status::Ok();
}

Status Engine::Impl::WriteSegment(const Segment& seg, const uint8_t* in, bool bypass,
                                  Tally& tally) {
  std::lock_guard cell(StripeOf(seg.line));
  const uint32_t b0 = seg.first_block(), b1 = seg.end_block();
  uint8_t* window = WindowFor(seg, in);
  if (window != in) std::memcpy(window + (seg.begin - size_t{b0} * kBlockSize), in, seg.end - seg.begin);
  std::optional<uint32_t> slot = slots.Lookup(seg.line, b0, b1);
  bool any_dirty = false;
  uint64_t hits = 0;
  for (uint32_t b = b0; b < b1 && slot; ++b) {
    uint8_t f = slots.Flags(*slot, b);
    hits += (f & kValid) ? 1 : 0;
    any_dirty |= (f & kDirty) != 0;
  }
  tally.hits += hits;
  tally.misses += (b1 - b0) - hits;
  CacheMode mode = EffectiveMode();
  // Dirty blocks are only on the cache: whatever the mode, a write to them
  // goes there, or the flushed dirty data could resurface after a crash.
  if (any_dirty || (mode == CacheMode::kWriteBack && !bypass)) {
    return WriteBackSegment(seg, slot, window);
  }
  return ThroughSegment(seg, slot, window, mode, !bypass);
}

// A block whose durable record is stable (kDirty, kClean) may not change
// under that record: after a crash the record would vouch for data that is
// no longer there (dirty), or for a cache copy older than the origin
// (clean). So before such a block is rewritten in place, or its origin copy
// written, its record is made unstable and synced: kDirtyOverwritten (any
// data the cache then holds is this block's) or kCleanFresh (proven at
// recovery and written back, so cache and origin agree again). Once per
// block per flush epoch; later writes in the epoch need nothing.
Status Engine::Impl::AnnounceOverwrite(uint32_t slot, uint32_t b0, uint32_t b1,
                                       bool origin_write, uint64_t epoch) {
  if (slots.PromisedButUnflushed(slot, b0, b1, epoch)) CACHECORE_RETURN_IF_ERROR(FlushCacheSide());
  return slots.MarkOverwrite(slot, b0, b1, origin_write, epoch) ? PutRecord(slot, true) : Status::Ok();
}

// Whether a write of blocks [b0, b1) of the slot goes to the cache as
// dirty data: in write-back, or over dirty blocks whatever the mode (they
// are only on the cache). Asked again once the write holds its flush epoch:
// SetMode's sync waits for writes that hold one, so a write that saw
// write-back and enters its epoch after the switch goes through instead of
// making a line dirty behind the switch's flush (ModeSwitchTest).
bool Engine::Impl::WriteBackWanted(uint32_t slot, uint32_t b0, uint32_t b1) const {
  if (EffectiveMode() == CacheMode::kWriteBack) return true;
  for (uint32_t b = b0; b < b1; ++b) {
    if (slots.Flags(slot, b) & kDirty) return true;
  }
  return false;
}

Status Engine::Impl::WriteBackSegment(const Segment& seg, std::optional<uint32_t> slot,
                                      uint8_t* window) {
  const uint32_t b0 = seg.first_block(), b1 = seg.end_block();
  if (!slot && admission.AdmitOnMiss(seg.line)) slot = Allocate(seg.line);
  if (!slot) return ThroughSegment(seg, std::nullopt, window, CacheMode::kWriteAround, false);
  CACHECORE_RETURN_IF_ERROR(FillEdges(seg, slot, window));

  // Held from the decision to the record: a sync that begins meanwhile
  // waits, and covers this write whole (see SlotTable::EnterWrite).
  std::optional<WriteEpoch> held(std::in_place, slots);
  if (!WriteBackWanted(*slot, b0, b1)) {
    held.reset();  // the mode left write-back meanwhile: through, as WriteSegment would now
    return ThroughSegment(seg, slot, window, EffectiveMode(), /*allocate=*/true);
  }
  const uint64_t epoch = held->epoch();
  ReachedStep("write-back-0-epoch-held");  // a test point
  CACHECORE_RETURN_IF_ERROR(AnnounceOverwrite(*slot, b0, b1, /*origin_write=*/false, epoch));
  std::bitset<256> overwritten;
  for (uint32_t b = b0; b < b1; ++b) {
    overwritten[b - b0] = (slots.Flags(*slot, b) & (kDirty | kOverwritten)) == (kDirty | kOverwritten);
  }
  ReachedStep("write-back-1-decided");  // a test point

  // 1. Data to the cache device ...
  Status s = dev.cache->Write(SlotOffset(*slot, b0), window, uint64_t{b1 - b0} * kBlockSize);
  if (!s.ok()) return CacheWriteFailed(seg, *slot, window, epoch, /*count=*/true);
  // 2. ... then its metadata (unsynced: Sync() and FUA make it durable,
  // the dirty-region map's bit with it) ...
  for (uint32_t b = b0; b < b1; ++b) {
    slots.MarkDirty(*slot, b, BlockCrc(window, b - b0), overwritten[b - b0], epoch);
  }
  // 3. ... and only then does the caller acknowledge the write.
  return PutRecord(*slot, false);
}

Status Engine::Impl::CacheWriteFailed(const Segment& seg, uint32_t slot, const uint8_t* data,
                                      uint64_t epoch, bool count) {
  const uint32_t b0 = seg.first_block(), b1 = seg.end_block();
  if (count) CountCacheError(stats.cache_write_err);
  CACHECORE_RETURN_IF_ERROR(AnnounceOverwrite(slot, b0, b1, /*origin_write=*/true, epoch));
  // Rule 3, as the cleaner keeps it: blocks written back over stable clean
  // data since the last sync get their fresh record synced before the
  // origin moves on, or the older kClean record could outlive a cut.
  for (uint32_t b = b0; b < b1; ++b) {
    if (slots.OverCleanUnsynced(slot, b)) {
      CACHECORE_RETURN_IF_ERROR(PutRecord(slot, true));
      break;
    }
  }
  CACHECORE_RETURN_IF_ERROR(SyncIfRecentlyEvicted(seg.line));
  slots.WaitWhileCleaning(seg.line, seg.line);
  Status o = dev.origin->Write(OriginOffset(seg.line, b0), data, uint64_t{b1 - b0} * kBlockSize);
  if (o.ok()) o = dev.origin->Flush();
  if (!o.ok()) {
    LiveStats::Bump(stats.origin_write_err);
    return o;
  }
  for (uint32_t b = b0; b < b1; ++b) slots.Invalidate(slot, b);
  RecordBatch batch;
  batch.records.PutLine(slot, slots.BuildRecord(slot));
  slots.ReleaseIfEmpty(slot, batch);
  return Commit(batch, true);
}

void Engine::Impl::UpdateCachedBlocks(uint32_t slot, uint32_t b0, uint32_t b1,
                                      const uint8_t* window, bool only_valid) {
  for (uint32_t b = b0; b < b1;) {
    if (only_valid && !(slots.Flags(slot, b) & kValid)) { ++b; continue; }
    uint32_t e = b + 1;
    while (e < b1 && (!only_valid || (slots.Flags(slot, e) & kValid))) ++e;
    const uint8_t* src = window + size_t{b - b0} * kBlockSize;
    if (dev.cache->Write(SlotOffset(slot, b), src, uint64_t{e - b} * kBlockSize).ok()) {
      uint64_t epoch = slots.FlushesStarted();
      for (uint32_t x = b; x < e; ++x) slots.MarkValidClean(slot, x, BlockCrc(window, x - b0), epoch);
    } else {
      CountCacheError(stats.cache_write_err);  // drop the blocks; the origin has them
      for (uint32_t x = b; x < e; ++x) slots.Invalidate(slot, x);
    }
    b = e;
  }
}

Status Engine::Impl::ThroughSegment(const Segment& seg, std::optional<uint32_t> slot,
                                    uint8_t* window, CacheMode mode, bool allocate) {
  const uint32_t b0 = seg.first_block(), b1 = seg.end_block();
  const uint8_t* exact = window + (seg.begin - size_t{b0} * kBlockSize);
  const bool cached = slot.has_value();
  Status filled = Status::Ok();
  if (cached) {
    // The partial edge blocks first, as a write-back write does: reading
    // one may repair a clean block and sync the line's whole record. Done
    // between the announcement and this write's own record, a sync that
    // completed meanwhile made the announced blocks stable in memory with
    // their old data, and that record called them clean while the origin
    // already held the new data (RaceTest.ThroughWriteRepairingAnEdge...).
    filled = FillEdges(seg, slot, window);
    CACHECORE_RETURN_IF_ERROR(AnnounceOverwrite(*slot, b0, b1, /*origin_write=*/true, slots.FlushesStarted()));
  }
  // Cached or not, the line may have left another slot whose record still
  // says clean on disk.
  CACHECORE_RETURN_IF_ERROR(SyncIfRecentlyEvicted(seg.line));
  slots.WaitWhileCleaning(seg.line, seg.line);
  Status s = dev.origin->Write(seg.line * line_size + seg.begin, exact, seg.end - seg.begin);
  if (!s.ok()) LiveStats::Bump(stats.origin_write_err);
  ReachedStep("through-1-origin-written");  // a test point
  bool keep_copies = s.ok() && (mode == CacheMode::kWriteThrough ||
                                mode == CacheMode::kWriteAround || mode == CacheMode::kWriteBack);
  if (!slot && keep_copies && mode == CacheMode::kWriteThrough && allocate &&
      seg.block_aligned() && admission.AdmitOnMiss(seg.line)) {
    slot = Allocate(seg.line);
  }
  if (!slot) return s;
  RecordBatch batch;
  if (keep_copies) {
    // Whole blocks replace the cached copy; a partial block is merged with
    // the cached copy when there is one (a new slot is only taken for whole
    // blocks: nothing to fill).
    if (!cached) filled = FillEdges(seg, slot, window);
    bool whole_new = mode == CacheMode::kWriteThrough && allocate && filled.ok();
    UpdateCachedBlocks(*slot, b0, b1, window, !whole_new);
    if (!filled.ok()) {
      if (seg.begin % kBlockSize) slots.Invalidate(*slot, b0);
      if (seg.end % kBlockSize) slots.Invalidate(*slot, b1 - 1);
    }
  } else {
    // Read-only and pass-through keep no copy of written data; after an
    // origin error the cached copy may be older than the origin: drop it.
    for (uint32_t b = b0; b < b1; ++b) slots.Invalidate(*slot, b);
  }
  batch.records.PutLine(*slot, slots.BuildRecord(*slot));
  slots.ReleaseIfEmpty(*slot, batch);
  Status m = Commit(batch, false);
  return s.ok() ? m : s;
}

Status Engine::Impl::DiscardSegment(const Segment& seg) {
  std::lock_guard cell(StripeOf(seg.line));
  std::optional<uint32_t> slot = slots.Lookup(seg.line, 0, 0);
  if (!slot) return Status::Ok();
  // Whole blocks are dropped, dirty or not. A block the discard covers only
  // in part is dropped when clean (the origin's copy, discarded there too,
  // is then the only one) and kept when dirty (cleaning rewrites it whole).
  const uint32_t b0 = seg.first_block(), b1 = seg.end_block();
  bool dropped_dirty = false, dropped_stable = false;
  for (uint32_t b = b0; b < b1; ++b) {
    bool whole = b * kBlockSize >= seg.begin && (b + 1) * kBlockSize <= seg.end;
    bool dirty = (slots.Flags(*slot, b) & kDirty) != 0;
    if (!whole && dirty) continue;
    dropped_dirty |= dirty;
    dropped_stable |= (slots.Flags(*slot, b) & kValid) && slots.IsStable(*slot, b);
    slots.Invalidate(*slot, b);
  }
  RecordBatch batch;
  batch.records.PutLine(*slot, slots.BuildRecord(*slot));
  slots.ReleaseIfEmpty(*slot, batch);
  // Dropped dirty data must stay dropped before the slot can hold another
  // line, or a crash could bring it back under the new line's name; and a
  // dropped stable clean block's kClean record must not outlive the drop
  // (a later write-back write over the block would not know of it: rule 3).
  return Commit(batch, dropped_dirty || dropped_stable);
}

}  // namespace cachecore
