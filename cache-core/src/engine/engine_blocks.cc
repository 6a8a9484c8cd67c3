// A block's life in the cache, as the request paths on the reactors share
// it: proving a cached block by its checksum, a lost dirty block's error,
// announcing an overwrite of stable blocks before it happens, marking
// blocks promoted or dirty once their data landed, and the failover of a
// write-back write the cache device refused (to the origin, durably).
#include <string>

#include "cachecore/metadata/checksum.h"
#include "engine/engine_impl.h"

namespace cachecore {

bool Engine::Impl::CachedBlockProven(uint32_t slot, uint32_t block, const uint8_t* data, bool unread) const {
  return !unread && CheckOf(data, slot, block) == slots.Crc(slot, block);
}

Status Engine::Impl::DirtyBlockLost(uint64_t line, uint32_t block, bool unread) {
  if (!unread) LiveStats::Bump(stats.checksum_failed);
  return Status::IoError("dirty block at origin offset " + std::to_string(OriginOffset(line, block)) +
                         (unread ? " cannot be read from the cache" : " fails its checksum"));
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
  return slots.MarkOverwrite(slot, b0, b1, origin_write, epoch) ? PutRecord(slot, true, false) : Status::Ok();
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
      CACHECORE_RETURN_IF_ERROR(PutRecord(slot, true, false));  // ahead of the origin's write
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
  batch.records.PutLine(slot, slots.BuildRecord(slot, true));
  slots.ReleaseIfEmpty(slot, batch);
  return Commit(batch, true);
}

void Engine::Impl::MarkPromoted(const IoRequest& io, uint64_t epoch) {
  if (!io.status.ok()) return CountCacheError(stats.cache_write_err);
  for (uint64_t off = 0; off < io.length; off += kBlockSize) {
    const uint64_t at = io.offset + off - kDataOffset;  // a write may span adjacent slots
    const auto slot = static_cast<uint32_t>(at / line_size), block = static_cast<uint32_t>(at % line_size / kBlockSize);
    slots.MarkValidClean(slot, block, CheckOf(static_cast<const uint8_t*>(io.buffer) + off, slot, block), epoch);
  }
}

void Engine::Impl::MarkSegmentDirty(const Segment& seg, uint32_t slot, const uint8_t* data,
                                    uint64_t epoch) {
  for (uint32_t b = seg.first_block(); b < seg.end_block(); ++b) {
    const bool overwritten = (slots.Flags(slot, b) & (kDirty | kOverwritten)) == (kDirty | kOverwritten);
    slots.MarkDirty(slot, b, CheckOf(data + size_t{b - seg.first_block()} * kBlockSize, slot, b),
                    overwritten, epoch);
  }
}

}  // namespace cachecore
