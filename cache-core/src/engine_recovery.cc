// Warm start: rebuild the slot table from the metadata store. Blocks whose
// record was written since the last flush are proven against the data on the
// cache device now, before anything is served (after a clean shutdown they
// were all synced, data before records, and are taken as recorded).
#include <algorithm>

#include "cachecore/checksum.h"
#include "engine_impl.h"

namespace cachecore {

namespace {
struct Unproven {
  uint32_t slot;
  uint32_t block;
  BlockClass cls;
};
}  // namespace

void Engine::Impl::RecoverBlock(uint32_t slot, uint32_t block, BlockClass cls, bool clean_shutdown,
                                std::optional<uint32_t> found_crc) {
  size_t i = BlockIndex(slot, block);
  bool matches = found_crc && *found_crc == block_crc[i];
  switch (cls) {
    case BlockClass::kDirtyOverwritten:
      // The data or a later write to it: 4 KiB writes land whole.
      block_flags[i] = kValid | kDirty;
      if (found_crc) block_crc[i] = *found_crc;
      break;
    case BlockClass::kDirtyFresh:
      block_flags[i] = matches ? (kValid | kDirty) : 0;
      break;
    default:  // kCleanFresh: after a crash the origin may lack it; write it back
      block_flags[i] = matches ? (clean_shutdown ? kValid : kValid | kDirty) : 0;
      break;
  }
}

Status Engine::Impl::LoadLines(bool clean_shutdown, std::vector<uint32_t>* changed_slots) {
  const uint64_t origin_lines = OriginLines();
  std::vector<Unproven> unproven;
  std::vector<bool> used(capacity, false);
  Status s = dev.metadata->ForEachLine([&](uint64_t slot, const LineRecord& r) -> Status {
    if (slot >= capacity || r.classes.size() != blocks_per_line || r.origin_line >= origin_lines) {
      return Status::Corruption("the record of slot " + std::to_string(slot) +
                                " does not fit this cache's geometry");
    }
    if (!map.emplace(r.origin_line, static_cast<uint32_t>(slot)).second) {
      return Status::Corruption("origin line " + std::to_string(r.origin_line) +
                                " is recorded in two slots");
    }
    used[slot] = true;
    slot_line[slot] = r.origin_line;
    for (uint32_t b = 0; b < blocks_per_line; ++b) {
      size_t i = BlockIndex(static_cast<uint32_t>(slot), b);
      block_crc[i] = r.crcs[b];
      block_epoch[i] = 0;
      switch (r.classes[b]) {
        case BlockClass::kInvalid: break;
        case BlockClass::kClean: block_flags[i] = kValid; break;
        case BlockClass::kDirty: block_flags[i] = kValid | kDirty; break;
        default: unproven.push_back({static_cast<uint32_t>(slot), b, r.classes[b]}); break;
      }
    }
    return Status::Ok();
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
      const Unproven& u = unproven[first + k];
      reads.push_back({IoOp::kRead, SlotOffset(u.slot, u.block), kBlockSize, blocks.data() + k * kBlockSize, Status()});
    }
    if (!reads.empty()) (void)dev.cache->SubmitAndWait(reads);  // each read's own status counts below
    for (size_t k = 0; k < n; ++k) {
      const Unproven& u = unproven[first + k];
      std::optional<uint32_t> found;  // nothing: the block could not be read
      if (clean_shutdown) found = block_crc[BlockIndex(u.slot, u.block)];
      else if (reads[k].status.ok()) found = Crc32c(blocks.data() + k * kBlockSize, kBlockSize);
      RecoverBlock(u.slot, u.block, u.cls, clean_shutdown, found);
      if (changed_slots->empty() || changed_slots->back() != u.slot) changed_slots->push_back(u.slot);
    }
  }

  for (uint32_t slot = 0; slot < capacity; ++slot) {
    if (!used[slot]) continue;
    for (uint32_t b = 0; b < blocks_per_line; ++b) {
      uint8_t f = Flags(slot, b);
      slot_valid_blocks[slot] += (f & kValid) ? 1 : 0;
      slot_dirty_blocks[slot] += (f & kDirty) ? 1 : 0;
    }
    if (slot_valid_blocks[slot] == 0) {  // nothing left: the slot is free again
      map.erase(slot_line[slot]);
      slot_line[slot] = kNoLine;
      used[slot] = false;
      changed_slots->push_back(slot);
      continue;
    }
    if (!pins.Contains(slot_line[slot])) policy->OnInsert(slot, slot_line[slot]);
    LiveStats::Bump(stats.occupancy_lines);
    if (slot_dirty_blocks[slot] > 0) {
      LiveStats::Bump(stats.dirty_lines);
      dirty_index[slot_line[slot]] = slot;
      dirty_map.LineDirty(slot_line[slot]);
    }
  }
  free_slots.clear();
  for (uint32_t slot = capacity; slot-- > 0;) {
    if (!used[slot]) free_slots.push_back(slot);
  }
  return Status::Ok();
}

Status Engine::Impl::RewriteRecords(const std::vector<uint32_t>& slots) {
  if (slots.empty()) return Status::Ok();
  MetadataStore::Batch batch;
  for (uint32_t slot : slots) {
    if (slot_line[slot] == kNoLine) batch.DeleteLine(slot);
    else batch.PutLine(slot, BuildRecord(slot));
  }
  return dev.metadata->Apply(batch, true);
}

}  // namespace cachecore
