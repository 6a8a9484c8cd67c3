// Cleaning: dirty lines go to the origin in origin order, coalesced into
// large writes, made durable there before they are marked clean.
#include <algorithm>
#include <chrono>

#include "cachecore/checksum.h"
#include "cachecore/steps.h"
#include "engine_impl.h"

namespace cachecore {

namespace {
constexpr uint64_t kMaxCleanWrite = 8 << 20;  // bytes per coalesced origin write

struct DirtyPiece {
  uint64_t origin_offset;
  uint32_t slot;
  uint32_t block;
  bool verified;
};
}  // namespace

Status Engine::Impl::CleanSlots(const std::vector<uint32_t>& slots_in) {
  std::vector<uint32_t> slots(slots_in);
  std::sort(slots.begin(), slots.end(),
            [&](uint32_t a, uint32_t b) { return slot_line[a] < slot_line[b]; });
  std::vector<DirtyPiece> pieces;
  std::vector<IoRequest> reads;
  for (uint32_t slot : slots) {
    for (uint32_t b = 0; b < blocks_per_line; ++b) {
      if (Flags(slot, b) & kDirty) pieces.push_back({OriginOffset(slot_line[slot], b), slot, b, false});
    }
  }
  if (pieces.empty()) return Status::Ok();
  AlignedBuffer buffer(pieces.size() * kBlockSize);
  // Read the dirty blocks, one request per run of a line's adjacent blocks.
  for (size_t i = 0; i < pieces.size();) {
    size_t j = i + 1;
    while (j < pieces.size() && pieces[j].slot == pieces[i].slot &&
           pieces[j].block == pieces[j - 1].block + 1) ++j;
    reads.push_back({IoOp::kRead, SlotOffset(pieces[i].slot, pieces[i].block),
                     (j - i) * kBlockSize, buffer.data() + i * kBlockSize, Status()});
    i = j;
  }
  if (!dev.cache->SubmitAndWait(reads).ok()) CountCacheError(stats.cache_read_err);
  size_t unproven = 0;
  for (size_t i = 0, r = 0; r < reads.size(); ++r) {
    size_t n = reads[r].length / kBlockSize;
    for (size_t k = 0; k < n; ++k, ++i) {
      const uint8_t* data = buffer.data() + i * kBlockSize;
      pieces[i].verified = reads[r].status.ok() &&
          Crc32c(data, kBlockSize) == block_crc[BlockIndex(pieces[i].slot, pieces[i].block)];
      if (!pieces[i].verified) ++unproven;
    }
  }
  // Never write what cannot be proven: such blocks stay dirty (and reads of
  // them fail) until they are overwritten.
  if (unproven > 0) LiveStats::Bump(stats.checksum_failed, unproven);

  std::vector<IoRequest> writes;
  for (size_t i = 0; i < pieces.size();) {
    if (!pieces[i].verified) { ++i; continue; }
    size_t j = i + 1;
    while (j < pieces.size() && pieces[j].verified &&
           pieces[j].origin_offset == pieces[j - 1].origin_offset + kBlockSize &&
           (j - i) * kBlockSize < kMaxCleanWrite) ++j;
    writes.push_back({IoOp::kWrite, pieces[i].origin_offset, (j - i) * kBlockSize,
                      buffer.data() + i * kBlockSize, Status()});
    i = j;
  }
  if (!writes.empty()) {
    // The origin copy must be durable before any block is called clean.
    Status s = dev.origin->SubmitAndWait(writes);
    if (!s.ok()) {
      LiveStats::Bump(stats.origin_write_err);
      return s;  // data stays dirty on the cache and is retried
    }
    ReachedStep("flush-1-origin-written");
    s = dev.origin->Flush();
    if (!s.ok()) {
      LiveStats::Bump(stats.origin_flush_err);
      return s;
    }
    ReachedStep("flush-2-origin-synced");
    LiveStats::Bump(stats.cleaner_writes, writes.size());
    LiveStats::Bump(stats.cleaned_blocks, pieces.size() - unproven);
  }
  MetadataStore::Batch batch;
  for (const DirtyPiece& p : pieces) {
    if (!p.verified) continue;
    MarkClean(p.slot, p.block);
    block_epoch[BlockIndex(p.slot, p.block)] = 0;  // durable on the origin now
  }
  for (uint32_t slot : slots) batch.PutLine(slot, BuildRecord(slot));
  // Synced: a line may be evicted (its slot reused) only once its clean
  // state is durable; the caller holds the stripes until we return.
  Status m = dev.metadata->Apply(batch, true);
  if (!m.ok()) {
    LiveStats::Bump(stats.metadata_err);
    return m;
  }
  ReachedStep("flush-3-marked-clean");
  if (unproven > 0) {
    return Status::Corruption(std::to_string(unproven) +
                              " dirty block(s) fail their checksum and cannot be cleaned");
  }
  return Status::Ok();
}

Result<uint64_t> Engine::Impl::CleanPass(uint64_t max_lines) {
  std::vector<uint64_t> lines;
  {
    std::lock_guard lock(mu);
    auto it = dirty_index.lower_bound(clean_cursor);
    for (size_t n = 0; n < dirty_index.size() && lines.size() < max_lines; ++n) {
      if (it == dirty_index.end()) it = dirty_index.begin();
      lines.push_back(it->first);
      ++it;
    }
    if (!lines.empty()) clean_cursor = lines.back() + 1;
  }
  return CleanLines(lines, nullptr);
}

Result<uint64_t> Engine::Impl::CleanLines(const std::vector<uint64_t>& lines,
                                          std::vector<uint64_t>* busy) {
  std::vector<size_t> held;
  std::vector<uint32_t> slots;
  for (uint64_t line : lines) {
    size_t stripe = StripeIndex(line);
    bool have = std::find(held.begin(), held.end(), stripe) != held.end();
    if (!have && !stripes[stripe].try_lock()) {  // in use by client I/O: later
      if (busy) busy->push_back(line);
      continue;
    }
    if (!have) held.push_back(stripe);
    std::lock_guard lock(mu);
    auto it = map.find(line);
    if (it != map.end() && slot_dirty_blocks[it->second] > 0) slots.push_back(it->second);
  }
  Status s = CleanSlots(slots);
  for (size_t stripe : held) stripes[stripe].unlock();
  if (!s.ok()) {
    if (busy) busy->insert(busy->end(), lines.begin(), lines.end());  // all of them again
    return s;
  }
  return static_cast<uint64_t>(slots.size());
}

Status Engine::Impl::FlushAll(const FlushProgress& progress) {
  // The lines dirty now, in origin order. Lines dirtied later belong to the
  // next flush: under sustained writes a flush that chased them would never
  // end (each line is cleaned once here, with what it holds by then).
  std::vector<uint64_t> pending;
  {
    std::lock_guard lock(mu);
    pending.reserve(dirty_index.size());
    for (const auto& entry : dirty_index) pending.push_back(entry.first);
  }
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

void Engine::Impl::CleanerLoop() {
  std::unique_lock lock(cleaner_mu);
  while (!cleaner_stop) {
    cleaner_cv.wait_for(lock, std::chrono::milliseconds(100));
    if (cleaner_stop) break;
    lock.unlock();
    const uint64_t high = uint64_t{capacity} * dirty_high_pct.load() / 100;
    const uint64_t low = uint64_t{capacity} * dirty_low_pct.load() / 100;
    if (failed.load() || stats.dirty_lines.load() > high) {
      uint64_t target = failed.load() ? 0 : low;
      while (stats.dirty_lines.load() > target) {
        {
          std::lock_guard stop_check(cleaner_mu);
          if (cleaner_stop) break;
        }
        Result<uint64_t> r = CleanPass(cleaner_batch_lines.load());
        if (!r.ok() || r.value() == 0) break;  // retried at the next wake-up
        std::this_thread::yield();              // let client I/O in between passes
      }
    }
    lock.lock();
  }
}

void Engine::Impl::StartCleaner() {
  if (!config.background_cleaner) return;
  cleaner = std::thread([this] { CleanerLoop(); });
}

void Engine::Impl::StopCleaner() {
  {
    std::lock_guard lock(cleaner_mu);
    cleaner_stop = true;
  }
  cleaner_cv.notify_all();
  if (cleaner.joinable()) cleaner.join();
}

}  // namespace cachecore
