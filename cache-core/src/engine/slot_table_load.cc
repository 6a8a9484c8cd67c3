// The slot table at a warm start (records or a snapshot taken in, unproven
// blocks settled) and its self-check. Nothing else runs while these do:
// AdoptRecord runs on several threads for disjoint slots and takes no lock (the
// caller joins them before FinishLoad, which takes mu_).
#include "engine/slot_table.h"

#include <algorithm>
#include <thread>

namespace cachecore {

namespace {
// What a block of a record that a completed flush settled is taken as. A
// dirty block: the flush made its data durable on the cache, and the engine
// announces any later rewrite of it (rule 1) in a record no flush settles.
// A clean fresh block is proven after a crash all the same: the origin's
// copy is not the cache's to vouch for (a write may be taking new data
// there); after a clean shutdown it is taken as recorded, as every fresh
// block is, and its record stays as it is.
BlockClass Settled(BlockClass c, bool clean_shutdown) {
  switch (c) {
    case BlockClass::kDirtyFresh:
    case BlockClass::kDirtyOverwritten: return BlockClass::kDirty;
    case BlockClass::kCleanFresh: return clean_shutdown ? BlockClass::kClean : c;
    default: return c;
  }
}
}  // namespace

Status SlotTable::AdoptRecord(uint64_t slot, const LineRecord& r, const LoadFrame& frame,
                              LoadPart& part) {
  const uint64_t origin_lines = frame.origin_lines;
  if (slot >= capacity_ || r.classes.size() != blocks_per_line_ || r.origin_line >= origin_lines) {
    return Status::Corruption("the record of slot " + std::to_string(slot) +
                              " does not fit this cache's geometry");
  }
  // A removal drops a volume's lines, synced, before the table forgets it.
  if (volumes_ != nullptr && VolumeOfLine(r.origin_line) == nullptr) {
    return Status::Corruption("the record of slot " + std::to_string(slot) + " holds line " +
                              std::to_string(r.origin_line) + ", which lies in no volume of the cache");
  }
  const auto s = static_cast<uint32_t>(slot);
  if (lines_.Get(s) != kNoLine) {
    return Status::Corruption("slot " + std::to_string(slot) + " has two records");
  }
  lines_.Set(s, r.origin_line);  // indexed and taken from the free slots by FinishLoad
  const bool stable = r.epoch != kNoEpoch && r.epoch < frame.completed;
  if (r.epoch != kNoEpoch) part.epochs = std::max(part.epochs, r.epoch + 1);
  for (uint32_t b = 0; b < blocks_per_line_; ++b) {
    size_t i = Index(s, b);
    block_crc_[i] = r.crcs[b];
    epochs_.Set(i, 0);
    switch (stable ? Settled(r.classes[b], frame.clean_shutdown) : r.classes[b]) {
      case BlockClass::kInvalid: break;
      case BlockClass::kClean: block_flags_[i] = kValid; break;
      case BlockClass::kDirty: block_flags_[i] = kValid | kDirty; break;
      default: part.unproven.push_back({s, b, r.classes[b]}); break;
    }
  }
  return Status::Ok();
}

std::vector<std::span<uint8_t>> SlotTable::SnapshotParts() {
  snapshot_started_ = flushes_started_.load();
  return {lines_.LowBytes(), lines_.HighBytes(),
          {reinterpret_cast<uint8_t*>(block_crc_.data()), block_crc_.size() * 4},
          {block_flags_.data(), block_flags_.size()},
          {reinterpret_cast<uint8_t*>(&snapshot_started_), sizeof snapshot_started_}};
}

// What a clean shutdown's records would have made of the same table: every
// block stable (its epoch 0 since construction), flags only valid and dirty.
Status SlotTable::AdoptSnapshot(uint64_t origin_lines) {
  for (uint32_t s = 0; s < capacity_; ++s) {
    const uint64_t line = lines_.Get(s);
    for (uint32_t b = 0; b < blocks_per_line_; ++b) {
      uint8_t& f = block_flags_[Index(s, b)];
      f &= kValid | kDirty;
      if ((f & kDirty) && !(f & kValid)) f = 0;
      if (f != 0 && line == kNoLine) {
        ForgetSnapshot();
        return Status::Corruption("the snapshot has a block in a slot with no line");
      }
    }
    if (line != kNoLine && line >= origin_lines) {
      ForgetSnapshot();
      return Status::Corruption("the snapshot has a line past the origin's end");
    }
  }
  loaded_epochs_ = snapshot_started_ + 1;
  return Status::Ok();
}

void SlotTable::ForgetSnapshot() {
  lines_.Clear();
  std::fill(block_crc_.begin(), block_crc_.end(), 0u);
  std::fill(block_flags_.begin(), block_flags_.end(), uint8_t{0});
  snapshot_started_ = 0;
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

Status SlotTable::FinishLoad(std::vector<uint32_t>& changed_slots, uint64_t completed) {
  // Epochs go on from past every record's and the last completed flush: a
  // record built from here on is not taken as stable at the next start
  // until a flush of this run has completed after it.
  const uint64_t start = std::max({loaded_epochs_, completed, uint64_t{1}});
  flushes_started_.store(start);
  flushes_completed_.store(start);
  MutexLock lock(mu_);
  std::vector<uint32_t> kept;
  for (uint32_t slot = 0; slot < capacity_; ++slot) {
    if (lines_.Get(slot) == kNoLine) continue;
    free_.Remove(slot);
    for (uint32_t b = 0; blocks_per_line_ > 1 && b < blocks_per_line_; ++b) {
      uint8_t f = Flags(slot, b);
      AddValidBlocks(slot, (f & kValid) ? 1 : 0);
      AddDirtyBlocks(slot, (f & kDirty) ? 1 : 0);
    }
    if (ValidBlocks(slot) == 0) {  // nothing left: the slot is free again
      lines_.Set(slot, kNoLine);
      free_.Put(slot);
      changed_slots.push_back(slot);
      continue;
    }
    kept.push_back(slot);
  }
  // The index is built on a thread of its own meanwhile (a third of the
  // load at ten million lines): it writes only itself, and reads only the
  // lines, which nothing below writes.
  uint32_t twice = LineIndex::kNotFound;
  std::thread indexer([this, &kept, &twice] { twice = IndexForFinishLoad(kept); });
  for (uint32_t slot : kept) {
    const uint64_t line = lines_.Get(slot);
    if (!pins_.Contains(line)) policy_->OnRestore(slot, line);
    CountLine(line, false, 1);
    if (DirtyBlocks(slot) > 0) {
      CountLine(line, true, 1);
      SetSlotDirtyLocked(slot, true);
      dirty_map_.LineDirty(line);
    }
  }
  dirty_lines_.Load([&](const DirtyLineSet::LineVisitor& visit) {
    mu_.AssertHeld();  // called back here, under mu_
    for (uint32_t slot : kept) {
      if (SlotDirtyLocked(slot)) visit(lines_.Get(slot));
    }
  });
  indexer.join();
  if (twice != LineIndex::kNotFound) {
    return Status::Corruption("origin line " + std::to_string(lines_.Get(twice)) +
                              " is recorded in two slots");
  }
  return Status::Ok();
}

uint32_t SlotTable::IndexForFinishLoad(const std::vector<uint32_t>& kept) { return index_.InsertAll(kept); }

namespace {
std::string SlotName(uint64_t slot) { return "slot " + std::to_string(slot); }
}  // namespace

void SlotTable::CheckInvariants(const std::vector<bool>& recorded,
                                const std::function<void(const std::string&)>& problem) {
  MutexLock lock(mu_);
  uint64_t free_slots = 0, cached = 0, dirty_lines = 0;
  for (uint32_t s = 0; s < capacity_; ++s) {
    uint16_t valid = 0, dirty = 0;
    for (uint32_t b = 0; b < blocks_per_line_; ++b) {
      valid += (Flags(s, b) & kValid) ? 1 : 0;
      dirty += (Flags(s, b) & kDirty) ? 1 : 0;
    }
    if (valid != ValidBlocks(s) || dirty != DirtyBlocks(s) || (dirty > 0) != SlotDirtyLocked(s)) {
      problem(SlotName(s) + ": block counts disagree with the flags");
    }
    const uint64_t line = lines_.Get(s);
    if (line == kNoLine) {
      ++free_slots;
      if (!free_.Contains(s)) problem(SlotName(s) + ": free, but not among the free slots");
      continue;
    }
    ++cached;
    dirty_lines += dirty > 0;
    if (free_.Contains(s)) problem(SlotName(s) + ": holds line " + std::to_string(line) + " and is among the free slots");
    if (index_.Find(line) != s) problem(SlotName(s) + ": line " + std::to_string(line) + " is not mapped to it");
    // A slot just allocated has no record until its first data lands.
    if (valid > 0 && !recorded[s]) problem(SlotName(s) + ": caches line " + std::to_string(line) + " without a record");
    if ((dirty > 0) != dirty_lines_.Contains(line)) problem(SlotName(s) + ": the dirty index disagrees");
  }
  if (free_slots != free_.size()) problem("the free slots count " + std::to_string(free_.size()) + ", not " + std::to_string(free_slots));
  if (cached != index_.size()) problem("the index holds " + std::to_string(index_.size()) + " lines, the slots " + std::to_string(cached));
  if (dirty_lines != dirty_lines_.size()) problem("the dirty index holds " + std::to_string(dirty_lines_.size()) + " lines, the slots " + std::to_string(dirty_lines));
}

}  // namespace cachecore
