// Warm start: rebuild the slot table from the metadata store. Blocks whose
// record was written since the last flush are proven against the data on the
// cache device now, before anything is served (after a clean shutdown they
// were all synced, data before records, and are taken as recorded).
#include <algorithm>

#include "cachecore/metadata/checksum.h"
#include "engine/engine_impl.h"

namespace cachecore {

Status Engine::Impl::LoadLines(bool clean_shutdown, std::vector<uint32_t>* changed_slots) {
  const uint64_t origin_lines = OriginLines();
  std::vector<UnprovenBlock> unproven;
  Status s = dev.metadata->ForEachLine([&](uint64_t slot, const LineRecord& r) -> Status {
    return slots.AdoptRecord(slot, r, origin_lines, unproven);
  });
  if (!s.ok()) return s;

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
      else if (reads[k].status.ok()) found = Crc32c(blocks.data() + k * kBlockSize, kBlockSize);
      slots.RecoverBlock(u, clean_shutdown, found);
      if (changed_slots->empty() || changed_slots->back() != u.slot) changed_slots->push_back(u.slot);
    }
  }
  slots.FinishLoad(*changed_slots);
  return Status::Ok();
}

Status Engine::Impl::RewriteRecords(const std::vector<uint32_t>& changed) {
  if (changed.empty()) return Status::Ok();
  MetadataStore::Batch batch;
  for (uint32_t slot : changed) {
    if (slots.LineOf(slot) == kNoLine) batch.DeleteLine(slot);
    else batch.PutLine(slot, slots.BuildRecord(slot));
  }
  return dev.metadata->Apply(batch, true);
}

}  // namespace cachecore
