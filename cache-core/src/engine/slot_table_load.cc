// The slot table at a warm start (records taken in, unproven blocks
// settled) and its self-check. Nothing else runs while these do; mu_ is
// taken all the same, for the analysis and for the memory order.
#include "engine/slot_table.h"

namespace cachecore {

Status SlotTable::AdoptRecord(uint64_t slot, const LineRecord& r, uint64_t origin_lines,
                              std::vector<UnprovenBlock>& unproven) {
  if (slot >= capacity_ || r.classes.size() != blocks_per_line_ || r.origin_line >= origin_lines) {
    return Status::Corruption("the record of slot " + std::to_string(slot) +
                              " does not fit this cache's geometry");
  }
  const auto s = static_cast<uint32_t>(slot);
  {
    MutexLock lock(mu_);
    if (!map_.emplace(r.origin_line, s).second) {
      return Status::Corruption("origin line " + std::to_string(r.origin_line) +
                                " is recorded in two slots");
    }
  }
  slot_line_[s] = r.origin_line;
  for (uint32_t b = 0; b < blocks_per_line_; ++b) {
    size_t i = Index(s, b);
    block_crc_[i] = r.crcs[b];
    block_epoch_[i] = 0;
    switch (r.classes[b]) {
      case BlockClass::kInvalid: break;
      case BlockClass::kClean: block_flags_[i] = kValid; break;
      case BlockClass::kDirty: block_flags_[i] = kValid | kDirty; break;
      default: unproven.push_back({s, b, r.classes[b]}); break;
    }
  }
  return Status::Ok();
}

void SlotTable::RecoverBlock(const UnprovenBlock& u, bool clean_shutdown,
                             std::optional<uint32_t> found_crc) {
  size_t i = Index(u.slot, u.block);
  bool matches = found_crc && *found_crc == block_crc_[i];
  switch (u.cls) {
    case BlockClass::kDirtyOverwritten:
      // The data or a later write to it: 4 KiB writes land whole.
      block_flags_[i] = kValid | kDirty;
      if (found_crc) block_crc_[i] = *found_crc;
      break;
    case BlockClass::kDirtyFresh:
      block_flags_[i] = matches ? (kValid | kDirty) : 0;
      break;
    default:  // kCleanFresh: after a crash the origin may lack it; write it back
      block_flags_[i] = matches ? (clean_shutdown ? kValid : kValid | kDirty) : 0;
      break;
  }
}

void SlotTable::FinishLoad(std::vector<uint32_t>& changed_slots) {
  MutexLock lock(mu_);
  for (uint32_t slot = 0; slot < capacity_; ++slot) {
    if (slot_line_[slot] == kNoLine) continue;
    for (uint32_t b = 0; b < blocks_per_line_; ++b) {
      uint8_t f = Flags(slot, b);
      slot_valid_blocks_[slot] += (f & kValid) ? 1 : 0;
      slot_dirty_blocks_[slot] += (f & kDirty) ? 1 : 0;
    }
    if (slot_valid_blocks_[slot] == 0) {  // nothing left: the slot is free again
      map_.erase(slot_line_[slot]);
      slot_line_[slot] = kNoLine;
      changed_slots.push_back(slot);
      continue;
    }
    if (!pins_.Contains(slot_line_[slot])) policy_->OnInsert(slot, slot_line_[slot]);
    LiveStats::Bump(stats_.occupancy_lines);
    if (slot_dirty_blocks_[slot] > 0) {
      LiveStats::Bump(stats_.dirty_lines);
      dirty_index_[slot_line_[slot]] = slot;
      dirty_map_.LineDirty(slot_line_[slot]);
    }
  }
  free_slots_.clear();
  for (uint32_t slot = capacity_; slot-- > 0;) {
    if (slot_line_[slot] == kNoLine) free_slots_.push_back(slot);
  }
}

namespace {
std::string SlotName(uint64_t slot) { return "slot " + std::to_string(slot); }
}  // namespace

void SlotTable::CheckInvariants(const std::vector<bool>& recorded,
                                const std::function<void(const std::string&)>& problem) {
  MutexLock lock(mu_);
  std::vector<int> on_free_list(capacity_, 0);
  for (uint32_t s : free_slots_) ++on_free_list[s];
  for (uint32_t s = 0; s < capacity_; ++s) {
    uint16_t valid = 0, dirty = 0;
    for (uint32_t b = 0; b < blocks_per_line_; ++b) {
      valid += (Flags(s, b) & kValid) ? 1 : 0;
      dirty += (Flags(s, b) & kDirty) ? 1 : 0;
    }
    if (valid != slot_valid_blocks_[s] || dirty != slot_dirty_blocks_[s]) {
      problem(SlotName(s) + ": block counts disagree with the flags");
    }
    const uint64_t line = slot_line_[s];
    if (line == kNoLine) {
      if (on_free_list[s] != 1) problem(SlotName(s) + ": free, but on the free list " + std::to_string(on_free_list[s]) + " times");
      continue;
    }
    if (on_free_list[s] != 0) problem(SlotName(s) + ": holds line " + std::to_string(line) + " and is on the free list");
    auto it = map_.find(line);
    if (it == map_.end() || it->second != s) problem(SlotName(s) + ": line " + std::to_string(line) + " is not mapped to it");
    // A slot just allocated has no record until its first data lands.
    if (valid > 0 && !recorded[s]) problem(SlotName(s) + ": caches line " + std::to_string(line) + " without a record");
    if ((dirty > 0) != (dirty_index_.count(line) == 1)) problem(SlotName(s) + ": the dirty index disagrees");
  }
  for (const auto& [line, slot] : map_) {
    if (slot >= capacity_ || slot_line_[slot] != line) problem("line " + std::to_string(line) + ": mapped to a slot that holds another");
  }
}

}  // namespace cachecore
