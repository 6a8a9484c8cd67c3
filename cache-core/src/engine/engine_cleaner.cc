// Cleaning: dirty lines go to the origin in origin order, coalesced into
// large writes, made durable there before they are marked clean.
#include <algorithm>
#include <chrono>

#include "cachecore/metadata/checksum.h"
#include "cachecore/engine/steps.h"
#include "base/thread_name.h"
#include "engine/engine_impl.h"

namespace cachecore {

namespace {
constexpr uint64_t kMaxCleanWrite = 8 << 20;  // bytes per coalesced origin write
}  // namespace

// One dirty block on its way to the origin, with the checksum of the data
// read for it: the block is called clean only if it still holds that data.
struct DirtyPiece {
  uint64_t origin_offset;
  uint64_t line;
  uint32_t slot;
  uint32_t block;
  uint32_t crc;
  bool verified;
  // Written back over stable clean data since the last completed sync
  // (kOverClean): the cache side must be synced before the origin takes it.
  bool over_clean;
};

struct CleanJob {
  std::vector<DirtyPiece> pieces;
  AlignedBuffer buffer;
  size_t unproven = 0;
  // Why blocks of the job were held back from the origin (a failed sync),
  // when they were: they stay dirty and are retried.
  Status held_back;
};

// Reads the dirty blocks of `slots` (stripes held), one request per run of a
// line's adjacent blocks, and checks each against its checksum.
void Engine::Impl::ReadDirty(const std::vector<uint32_t>& dirty_slots, CleanJob& job) {
  std::vector<uint32_t> sorted(dirty_slots);
  std::sort(sorted.begin(), sorted.end(),
            [&](uint32_t a, uint32_t b) { return slots.LineOf(a) < slots.LineOf(b); });
  for (uint32_t slot : sorted) {
    for (uint32_t b = 0; b < blocks_per_line; ++b) {
      if (!(slots.Flags(slot, b) & kDirty)) continue;
      const bool over_clean = slots.OverCleanUnsynced(slot, b);
      const uint64_t line = slots.LineOf(slot);
      job.pieces.push_back({OriginOffset(line, b), line, slot, b, slots.Crc(slot, b), false, over_clean});
    }
  }
  if (job.pieces.empty()) return;
  job.buffer.Reserve(job.pieces.size() * kBlockSize);
  std::vector<IoRequest> reads;
  for (size_t i = 0; i < job.pieces.size();) {
    size_t j = i + 1;
    while (j < job.pieces.size() && job.pieces[j].slot == job.pieces[i].slot &&
           job.pieces[j].block == job.pieces[j - 1].block + 1) ++j;
    reads.push_back({IoOp::kRead, SlotOffset(job.pieces[i].slot, job.pieces[i].block),
                     (j - i) * kBlockSize, job.buffer.data() + i * kBlockSize, Status()});
    i = j;
  }
  if (!dev.cache->SubmitAndWait(reads).ok()) CountCacheError(stats.cache_read_err);
  for (size_t i = 0, r = 0; r < reads.size(); ++r) {
    for (size_t k = 0; k < reads[r].length / kBlockSize; ++k, ++i) {
      const uint8_t* data = job.buffer.data() + i * kBlockSize;
      job.pieces[i].verified =
          reads[r].status.ok() && CheckOf(data, job.pieces[i].slot, job.pieces[i].block) == job.pieces[i].crc;
      if (!job.pieces[i].verified) ++job.unproven;
    }
  }
  // Never write what cannot be proven: such blocks stay dirty (and reads of
  // them fail) until they are overwritten.
  if (job.unproven > 0) LiveStats::Bump(stats.checksum_failed, job.unproven);
}

// Writes the proven pieces to the origin, coalesced, and makes them durable
// there. Needs no stripe: the lines are in `cleaning`, so nothing else
// writes their origin blocks meanwhile (see WaitWhileCleaning).
Status Engine::Impl::WriteClean(CleanJob& job) {
  CACHECORE_RETURN_IF_ERROR(SyncBeforeCleaning(job));
  std::vector<IoRequest> writes;
  for (size_t i = 0; i < job.pieces.size();) {
    if (!job.pieces[i].verified) { ++i; continue; }
    size_t j = i + 1;
    while (j < job.pieces.size() && job.pieces[j].verified &&
           job.pieces[j].origin_offset == job.pieces[j - 1].origin_offset + kBlockSize &&
           (j - i) * kBlockSize < kMaxCleanWrite) ++j;
    writes.push_back({IoOp::kWrite, job.pieces[i].origin_offset, (j - i) * kBlockSize,
                      job.buffer.data() + i * kBlockSize, Status()});
    i = j;
  }
  if (writes.empty()) return Status::Ok();
  // The origin copy must be durable before any block is called clean.
  // The origin itself, not the meter: cleaning is not client I/O there.
  Status s = raw_origin->SubmitAndWait(writes);
  if (!s.ok()) {
    LiveStats::Bump(stats.origin_write_err);
    return s;  // data stays dirty on the cache and is retried
  }
  ReachedStep("flush-1-origin-written");
  s = raw_origin->Flush();
  if (!s.ok()) {
    LiveStats::Bump(stats.origin_flush_err);
    return s;
  }
  ReachedStep("flush-2-origin-synced");
  LiveStats::Bump(stats.cleaner_writes, writes.size());
  LiveStats::Bump(stats.cleaned_blocks, job.pieces.size() - job.unproven);
  return Status::Ok();
}

// What must be durable before the origin takes the job's blocks. A line
// evicted since the last sync may still have a stable clean record in its
// old slot (rule 2): the store is synced first. A block written back over
// stable clean data since the last sync (rule 3): its durable record may
// still be the older kClean, and the cache device may hold only the older
// data; were the origin to take the new data first, a crash could leave the
// block reading old until evicted, then new, without a write in between.
// So the cache side is synced first, data then records. A cache device
// that cannot flush must still drain to the origin (it is failing): then
// the records alone are synced, which is enough for this rule (the durable
// record becomes the fresh one, proven against the data at recovery, and
// no longer vouches for the older data as clean). Only when that fails
// too do such blocks stay dirty and off the origin (the rest goes on).
Status Engine::Impl::SyncBeforeCleaning(CleanJob& job) {
  std::vector<uint64_t> lines;
  bool over_clean = false;
  for (const DirtyPiece& p : job.pieces) {
    if (lines.empty() || lines.back() != p.line) lines.push_back(p.line);
    over_clean = over_clean || (p.verified && p.over_clean);
  }
  if (over_clean) {
    (void)FlushCacheSide();  // counted when it fails; the records go on
    job.held_back = SyncMetadata();
    if (job.held_back.ok()) return Status::Ok();
    for (DirtyPiece& p : job.pieces) p.verified = p.verified && !p.over_clean;
  }
  return SyncIfRecentlyEvicted(lines);
}

// Calls clean, durably, the pieces whose block still holds the data that
// went to the origin, for the lines whose stripes `held` says are held.
Status Engine::Impl::MarkCleaned(const CleanJob& job, const std::function<bool(uint64_t)>& held) {
  MetadataStore::Batch batch;
  std::vector<uint32_t> changed;
  for (const DirtyPiece& p : job.pieces) {
    if (!p.verified || !held(p.line) || slots.LineOf(p.slot) != p.line) continue;
    if (!slots.MarkCleanedIfUnchanged(p.slot, p.block, p.crc)) continue;  // rewritten meanwhile
    if (changed.empty() || changed.back() != p.slot) changed.push_back(p.slot);
  }
  for (uint32_t slot : changed) batch.PutLine(slot, slots.BuildRecord(slot, true));
  // Synced: a line may be evicted (its slot reused) only once its clean
  // state is durable; its stripe stays held until we return.
  Status m = batch.empty() ? Status::Ok() : ApplyRecords(batch, true);
  if (!m.ok()) return m;
  ReachedStep("flush-3-marked-clean");
  if (job.unproven > 0) {
    return Status::Corruption(std::to_string(job.unproven) +
                              " dirty block(s) fail their checksum and cannot be cleaned");
  }
  return job.held_back;
}

Result<uint64_t> Engine::Impl::CleanPass(uint64_t max_lines) {
  return CleanLines(slots.NextDirtyLines(max_lines), nullptr);
}

// Three steps, so that client I/O waits for the origin only when it must:
// the lines' stripes are held while their dirty blocks are read from the
// cache, then released while the origin writes and flushes (writes into the
// cache go on; the lines are in `cleaning`, so nobody else writes their
// origin blocks or evicts them), then taken again, without waiting, to call
// clean what still holds the data written. A line whose stripe is busy then
// stays dirty (its data is on the origin; the next pass finds it clean there).
Result<uint64_t> Engine::Impl::CleanLines(const std::vector<uint64_t>& lines,
                                          std::vector<uint64_t>* busy) {
  std::vector<size_t> held;
  std::vector<uint32_t> dirty_slots;
  std::vector<uint64_t> taken;
  auto holds = [&](uint64_t line) {
    return std::find(held.begin(), held.end(), StripeIndex(line)) != held.end();
  };
  // The line's stripe, held already or taken now without waiting.
  auto take = [&](uint64_t line) {
    if (holds(line)) return true;
    if (!stripes[StripeIndex(line)].try_lock()) return false;
    held.push_back(StripeIndex(line));
    return true;
  };
  auto give_back = [&] {
    for (size_t stripe : held) stripes[stripe].unlock();
    held.clear();
  };
  for (uint64_t line : lines) {
    if (!take(line)) {  // in use by client I/O: later
      if (busy) busy->push_back(line);
      continue;
    }
    bool cleaned_elsewhere = false;
    std::optional<uint32_t> slot = slots.BeginCleaning(line, cleaned_elsewhere);
    if (cleaned_elsewhere && busy) busy->push_back(line);  // another cleaner has it
    if (!slot) continue;
    dirty_slots.push_back(*slot);
    taken.push_back(line);
  }
  CleanJob job;
  ReadDirty(dirty_slots, job);
  give_back();
  Status s = WriteClean(job);
  uint64_t cleaned = 0;
  if (s.ok() && !job.pieces.empty()) {
    for (uint64_t line : taken) {
      if (take(line)) ++cleaned;
      else if (busy) busy->push_back(line);
    }
    s = MarkCleaned(job, holds);
  }
  slots.EndCleaning(taken);
  give_back();
  if (!s.ok()) {
    if (busy) busy->insert(busy->end(), lines.begin(), lines.end());  // all of them again
    return s;
  }
  return cleaned;
}

Status Engine::Impl::FlushAll(const FlushProgress& progress, uint64_t first, uint64_t end) {
  // The lines dirty now, in origin order. Lines dirtied later belong to the
  // next flush: under sustained writes a flush that chased them would never
  // end (each line is cleaned once here, with what it holds by then).
  std::vector<uint64_t> pending = slots.DirtyLines(first, end);
  const uint64_t total = pending.size();
  if (progress) progress(total, total);
  int failures = 0, idle = 0;
  size_t next = 0;
  while (next < pending.size()) {
    size_t n = std::min<size_t>(std::max<uint32_t>(cleaner_batch_lines.load(), 1), pending.size() - next);
    std::vector<uint64_t> batch(pending.begin() + next, pending.begin() + next + n), retry;
    next += n;
    Result<uint64_t> r = CleanLines(batch, &retry);
    pending.insert(pending.end(), retry.begin(), retry.end());
    if (next < pending.size()) ReachedStep("flush-4-batch-done");
    if (progress) progress(pending.size() - next, total);
    if (!r.ok() && ++failures >= 10) return r.status();
    if (!r.ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10 * failures));
    } else if (retry.size() == n) {
      // Every line of the batch is busy with client I/O right now.
      if (++idle > 20000) return Status::Busy("dirty lines stayed busy; flush did not finish");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return SyncAll();  // writes the dirty-region map's cleared bits too
}

Status Engine::Impl::CleanForModeSwitch(const FlushProgress& progress) {
  // A write-back write that saw the old mode holds its flush epoch until its
  // record is put, and looks at the mode again once it holds it: beginning a
  // flush epoch waits for every such write, so the dirty lines FlushAll then
  // finds include theirs (ModeSwitchTest). No device is flushed here (a
  // cache that cannot flush must still drain); a later sync completes the
  // epoch, covering everything before it.
  {
    MutexLock flight(flush_flight_mu);
    (void)slots.BeginFlush();
  }
  // A write over a block still dirty goes to the cache whatever the mode; one
  // that lands while FlushAll has that line on its way to the origin leaves
  // it dirty: those lines are flushed again.
  constexpr int kPasses = 8;
  for (int pass = 0; pass < kPasses; ++pass) {
    CACHECORE_RETURN_IF_ERROR(FlushAll(progress));
    if (stats.dirty_lines.load() == 0) return Status::Ok();
  }
  return Status::Busy("lines were written again while they were cleaned; still in write-back");
}

}  // namespace cachecore
