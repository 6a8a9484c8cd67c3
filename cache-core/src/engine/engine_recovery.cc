// Warm start: rebuild the slot table from the metadata store. Blocks whose
// record was written since the last flush are proven against the data on the
// cache device now, before anything is served (after a clean shutdown they
// were all synced, data before records, and are taken as recorded).
#include <algorithm>
#include <thread>

#include "cachecore/engine/steps.h"
#include "cachecore/metadata/checksum.h"
#include "engine/engine_impl.h"

namespace cachecore {

Status Engine::Impl::LoadLines(bool clean_shutdown, std::vector<uint32_t>* changed_slots) {
  const uint64_t origin_lines = OriginLines();
  Result<uint64_t> completed = dev.metadata->GetCompletedFlush();
  if (!completed.ok()) return completed.status();
  const bool from_snapshot = clean_shutdown && LoadSnapshot(origin_lines);
  // Used once, or left by a shutdown this start does not follow: gone
  // before the start writes anything (the store's next write would outdate
  // it all the same).
  (void)dev.metadata->DropSnapshot();
  if (from_snapshot) return slots.FinishLoad(*changed_slots, *completed);
  std::vector<UnprovenBlock> unproven;
  CACHECORE_RETURN_IF_ERROR(AdoptRecords({origin_lines, *completed, clean_shutdown}, unproven));

  // After a clean shutdown every block and record was synced, each record
  // after its data: the checksums hold without reading a block. After a
  // crash each unproven block is read and checked, in batches.
  constexpr size_t kBatch = 256;
  AlignedBuffer blocks(kBatch * kBlockSize);
  std::vector<IoRequest> reads;
  for (size_t first = 0; first < unproven.size(); first += kBatch) {
    const size_t n = std::min(kBatch, unproven.size() - first);
    reads.clear();
    for (size_t k = 0; k < n && !clean_shutdown; ++k) {
      const UnprovenBlock& u = unproven[first + k];
      reads.push_back({IoOp::kRead, SlotOffset(u.slot, u.block), kBlockSize, blocks.data() + k * kBlockSize, Status()});
    }
    if (!reads.empty()) (void)dev.cache->SubmitAndWait(reads);  // each read's own status counts below
    for (size_t k = 0; k < n; ++k) {
      const UnprovenBlock& u = unproven[first + k];
      std::optional<uint32_t> found;  // nothing: the block could not be read
      if (clean_shutdown) found = slots.Crc(u.slot, u.block);
      else if (reads[k].status.ok()) found = CheckOf(blocks.data() + k * kBlockSize, u.slot, u.block);
      slots.RecoverBlock(u, clean_shutdown, found);
      if (changed_slots->empty() || changed_slots->back() != u.slot) changed_slots->push_back(u.slot);
    }
  }
  return slots.FinishLoad(*changed_slots, *completed);
}

// Takes in every record, on several threads, each over its share of the
// slots (they touch disjoint slots). A thread decodes as fast as a core
// goes until its next read from the store's files; twice as many threads
// as cores keep the cores busy meanwhile (at ten million lines after a
// crash, with the files out of the page cache, four threads on two cores
// took 1.8 to 2.0 s where two took 2.1 to 2.2). `unproven` gets the blocks
// to prove, in slot order.
Status Engine::Impl::AdoptRecords(const SlotTable::LoadFrame& frame, std::vector<UnprovenBlock>& unproven) {
  const size_t n = std::clamp<size_t>(2 * std::thread::hardware_concurrency(), 2, 8);
  std::vector<SlotTable::LoadPart> parts(n);
  std::vector<Status> status(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t first = capacity * i / n, end = i + 1 == n ? UINT64_MAX : capacity * (i + 1) / n;
    threads.emplace_back([&, i, first, end] {
      status[i] = dev.metadata->ForEachLineIn(first, end, [&](uint64_t slot, const LineRecord& r) {
        return slots.AdoptRecord(slot, r, frame, parts[i]);
      });
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& s : status) CACHECORE_RETURN_IF_ERROR(s);
  for (SlotTable::LoadPart& part : parts) {
    slots.AddLoadedEpochs(part);
    unproven.insert(unproven.end(), part.unproven.begin(), part.unproven.end());
  }
  return Status::Ok();
}

// Whose a snapshot is and how it is laid out: a snapshot of another
// cache, format or geometry is not taken.
std::string Engine::Impl::SnapshotTag() const {
  return "cachectl slot table 1, format " + std::to_string(kFormatVersion) + ", cache " +
         UuidToString(identity.uuid) + ", " + std::to_string(capacity) + " lines of " +
         std::to_string(slots.blocks_per_line()) + " blocks";
}

// At a clean shutdown, before its sync (nothing else runs).
Status Engine::Impl::PutUnsettledRecords() {
  MetadataStore::Batch batch;
  for (uint32_t slot : slots.SlotsWithUnsettledRecords()) batch.PutLine(slot, slots.BuildRecord(slot, true));
  return batch.empty() ? Status::Ok() : ApplyRecords(batch, false);
}

// At a clean shutdown, the last thing before the superblock says so.
Status Engine::Impl::WriteSnapshot() {
  std::vector<std::span<uint8_t>> parts = slots.SnapshotParts();
  const std::vector<std::span<const uint8_t>> written(parts.begin(), parts.end());
  return dev.metadata->WriteSnapshot(SnapshotTag(), written);
}

// After a clean shutdown: the tables as the shutdown left them, when the
// snapshot is this cache's and the store has not changed since.
bool Engine::Impl::LoadSnapshot(uint64_t origin_lines) {
  const std::vector<std::span<uint8_t>> parts = slots.SnapshotParts();
  Status s = dev.metadata->ReadSnapshot(SnapshotTag(), parts);
  if (s.ok()) s = slots.AdoptSnapshot(origin_lines);  // which forgets it when it does not fit
  // Not found or another's: nothing was read into the table.
  else if (s.code() != StatusCode::kNotFound && s.code() != StatusCode::kMismatch) slots.ForgetSnapshot();
  started_from_snapshot = s.ok();
  return s.ok();
}

// Every record in this build's format (and the deletes of the slots the
// load emptied, `changed`'s free ones), then the store's identity, then the
// superblock: a crash between leaves versions that differ, both known, and
// the next start upgrades again (records of either format read alike).
// From format 2 the records stay as they are (format 3 adds the volume
// table; the cache is its volume 0, at 0).
Status Engine::Impl::UpgradeFormat(const std::vector<uint32_t>& changed, uint32_t from) {
  std::vector<uint32_t> all = changed;
  if (from < 2) {
    all.clear();
    for (uint32_t slot = 0; slot < capacity; ++slot) {
      if (slots.LineOf(slot) != kNoLine) all.push_back(slot);
    }
    for (uint32_t slot : changed) {
      if (slots.LineOf(slot) == kNoLine) all.push_back(slot);  // its record is deleted
    }
  }
  ReachedStep("upgrade-1-begun");  // a test point
  CACHECORE_RETURN_IF_ERROR(RewriteRecords(all));
  ReachedStep("upgrade-2-records-rewritten");  // a test point
  {
    MutexLock lock(volume_mu);  // Open's: nothing else runs
    CACHECORE_RETURN_IF_ERROR(dev.metadata->PutConfig(kVolumesKey, EncodeVolumeTable(volume_table), false));
  }
  identity.format_version = kFormatVersion;
  CACHECORE_RETURN_IF_ERROR(dev.metadata->PutIdentity(identity, true));
  // The superblock, and the dirty-region map's pages under format 3's seed.
  return PersistLineSpace();
}

// In batches, the last one synced: each record stands alone (one not
// rewritten before a crash is proven again at the next start), and a
// batch of ten million records would hold gigabytes.
Status Engine::Impl::RewriteRecords(const std::vector<uint32_t>& changed) {
  constexpr size_t kBatch = 65536;
  for (size_t first = 0; first < changed.size(); first += kBatch) {
    MetadataStore::Batch batch;
    const size_t end = std::min(changed.size(), first + kBatch);
    for (size_t k = first; k < end; ++k) {
      const uint32_t slot = changed[k];
      if (slots.LineOf(slot) == kNoLine) batch.DeleteLine(slot);
      else batch.PutLine(slot, slots.BuildRecord(slot, true));
    }
    CACHECORE_RETURN_IF_ERROR(dev.metadata->Apply(batch, end == changed.size()));
  }
  return Status::Ok();
}

}  // namespace cachecore
