// Slots as the engine's paths use them: allocation with the stripes of the
// victims, and records going to the store. The state is the slot table's
// (engine/slot_table.h).
#include <algorithm>

#include "engine/engine_async.h"

namespace cachecore {

namespace {

// Victims for one allocation: a victim line's stripe is one the caller
// holds already, or one nobody holds (taken here without waiting).
class StripeVictims : public VictimHandler {
 public:
  StripeVictims(Engine::Impl& im, std::span<const size_t> held, std::span<const Segment> keep)
      : im_(im), held_(held), keep_(keep) {}
  ~StripeVictims() override { ReleaseClaim(); }

  bool Claim(uint64_t line) override {
    for (const Segment& k : keep_) {
      if (k.line == line) return false;  // the caller is working on it
    }
    const size_t stripe = Engine::Impl::StripeIndex(line);
    if (std::binary_search(held_.begin(), held_.end(), stripe)) return true;  // held already
    if (!im_.stripes[stripe].try_lock()) return false;
    taken_ = &im_.stripes[stripe];
    return true;
  }
  void ApplyDelete(MetadataStore::Batch& batch) override {
    (void)im_.ApplyRecords(batch, false);  // counted; the slot is free either way
  }
  void ReleaseClaim() override {
    if (taken_) taken_->unlock();
    taken_ = nullptr;
  }

 private:
  Engine::Impl& im_;
  std::span<const size_t> held_;
  std::span<const Segment> keep_;
  StripeLock* taken_ = nullptr;
};

// Victims for a request on a reactor: a line whose stripe the request
// holds, or one nobody holds or waits for (claimed until EndEvictions).
class ReactorVictims : public VictimHandler {
 public:
  ReactorVictims(Engine::Impl& im, std::span<const size_t> held, std::span<const Segment> keep,
                 ReactorEvictions& evictions)
      : im_(im), held_(held), keep_(keep), evictions_(evictions) {}

  bool Claim(uint64_t line) override {
    for (const Segment& k : keep_) {
      if (k.line == line) return false;  // the request is working on it
    }
    const size_t stripe = Engine::Impl::StripeIndex(line);
    if (std::binary_search(held_.begin(), held_.end(), stripe)) return true;
    std::vector<size_t>& claimed = evictions_.stripes;
    if (std::find(claimed.begin(), claimed.end(), stripe) != claimed.end()) return true;
    if (!im_.stripes[stripe].try_lock_unwanted()) return false;
    claimed.push_back(stripe);
    return true;
  }
  // Never called: TakeSlotWithoutWaiting leaves the delete and the claim to
  // the request.
  void ApplyDelete(MetadataStore::Batch&) override {}
  void ReleaseClaim() override {}

 private:
  Engine::Impl& im_;
  std::span<const size_t> held_;
  std::span<const Segment> keep_;
  ReactorEvictions& evictions_;
};

}  // namespace

std::optional<uint32_t> Engine::Impl::TakeSlotOnReactor(uint64_t line, std::span<const size_t> held,
                                                        std::span<const Segment> keep,
                                                        ReactorEvictions& evictions) {
  ReactorVictims victims(*this, held, keep, evictions);
  uint64_t evicted = kNoLine;
  bool sync_due = false;
  std::optional<uint32_t> slot = slots.TakeSlotWithoutWaiting(line, victims, evicted, sync_due);
  if (slot && evicted != kNoLine) {
    evictions.lines.push_back(evicted);
    evictions.slots.push_back(*slot);
  }
  QueueMetadataSyncIf(sync_due);
  return slot;
}

void Engine::Impl::AddLineRecords(std::span<const uint32_t> touched, const RecordBatch& emptied,
                                  MetadataStore::Batch& batch, bool settle) {
  for (uint32_t slot : touched) {
    if (slot != SlotTable::kNoSlot && slots.ValidBlocks(slot) > 0) batch.PutLine(slot, slots.BuildRecord(slot, settle));
  }
  for (const auto& [line, slot] : emptied.emptied) batch.DeleteLine(slot);
}

void Engine::Impl::EndEvictions(ReactorEvictions& evictions) {
  slots.ListEvictions(evictions.lines);  // their deletes are in the store
  for (size_t stripe : evictions.stripes) stripes[stripe].unlock();
  evictions.lines.clear();
  evictions.slots.clear();
  evictions.stripes.clear();
}

Status Engine::Impl::ApplyRecords(MetadataStore::Batch& batch, bool sync) {
  Status s = dev.metadata->Apply(batch, sync);
  if (!s.ok()) LiveStats::Bump(stats.metadata_err);
  return s;
}

Status Engine::Impl::Commit(RecordBatch& batch, bool sync) {
  Status s = ApplyRecords(batch.records, sync);
  // Freed even when the delete failed: the next record for the slot
  // replaces the old one all the same.
  slots.FreeEmptied(batch);
  return s;
}

std::optional<uint32_t> Engine::Impl::TakeSlot(uint64_t line, std::span<const size_t> held,
                                               std::span<const Segment> keep) {
  StripeVictims victims(*this, held, keep);
  bool sync_due = false;
  std::optional<uint32_t> slot = slots.Allocate(line, victims, sync_due);
  if (sync_due) (void)SyncMetadata();  // bounds the unsynced evictions; a failure is counted
  return slot;
}

Status Engine::Impl::PutRecord(uint32_t slot, bool sync, bool settles) {
  MetadataStore::Batch batch;
  batch.PutLine(slot, slots.BuildRecord(slot, settles));
  return ApplyRecords(batch, sync);
}

void Engine::Impl::CountCacheError(std::atomic<uint64_t>& counter) {
  LiveStats::Bump(counter);
  if (cache_errors.fetch_add(1) + 1 >= config.error_threshold && !failed.exchange(true)) {
    // Past the threshold the cache device is not trusted for new data; the
    // cleaner keeps trying to move what is dirty to the origin.
    cleaner_cv.notify_all();
  }
}

}  // namespace cachecore
