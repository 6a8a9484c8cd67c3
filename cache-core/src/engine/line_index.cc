#include "engine/line_index.h"

#include <bit>

#include "base/mix64.h"

namespace cachecore {

namespace {
constexpr uint32_t kEmpty = UINT32_MAX;
// Entries per slot: a load of 0.83 keeps a failed lookup to a few probes
// in one or two CPU cache lines (the fingerprint spares reading the lines).
constexpr uint64_t kTableNumerator = 6, kTableDenominator = 5;
}  // namespace

LineIndex::LineIndex(uint32_t capacity, const PackedLines& lines)
    : lines_(lines),
      // A slot is below `capacity`, so all-ones in slot_bits_ is never one
      // and an entry is never kEmpty.
      slot_bits_(static_cast<uint32_t>(std::bit_width(capacity))),
      slot_mask_(slot_bits_ >= 32 ? UINT32_MAX : (uint32_t{1} << slot_bits_) - 1),
      fingerprint_mask_(slot_bits_ >= 32 ? 0 : ~slot_mask_),
      table_(size_t{capacity} * kTableNumerator / kTableDenominator + 2, kEmpty) {}

uint64_t LineIndex::Hash(uint64_t line) const { return Mix64(line); }

size_t LineIndex::Probe(uint64_t line, uint64_t hash) const {
  const uint32_t fingerprint = Fingerprint(hash);
  for (size_t i = Home(hash);; i = Next(i)) {
    const uint32_t entry = table_[i];
    if (entry == kEmpty) return i;
    if ((entry & fingerprint_mask_) == fingerprint && lines_.Get(entry & slot_mask_) == line) {
      return i;
    }
  }
}

uint32_t LineIndex::Find(uint64_t line) const {
  const uint32_t entry = table_[Probe(line, Hash(line))];
  return entry == kEmpty ? kNotFound : entry & slot_mask_;
}

bool LineIndex::Insert(uint64_t line, uint32_t slot) {
  const uint64_t hash = Hash(line);
  const size_t i = Probe(line, hash);
  if (table_[i] != kEmpty) return false;
  table_[i] = slot | Fingerprint(hash);
  ++size_;
  return true;
}

uint32_t LineIndex::InsertAll(const std::vector<uint32_t>& slots) {
  constexpr size_t kAhead = 16;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i + kAhead < slots.size()) {
      __builtin_prefetch(&table_[Home(Hash(lines_.Get(slots[i + kAhead])))], 1);
    }
    if (!Insert(lines_.Get(slots[i]), slots[i])) return slots[i];
  }
  return kNotFound;
}

void LineIndex::Erase(uint64_t line) {
  size_t hole = Probe(line, Hash(line));
  if (table_[hole] == kEmpty) return;
  table_[hole] = kEmpty;
  --size_;
  // Entries after the hole whose probe passed through it move into it.
  for (size_t j = Next(hole); table_[j] != kEmpty; j = Next(j)) {
    const size_t home = Home(Hash(lines_.Get(table_[j] & slot_mask_)));
    const bool stays = hole < j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    table_[hole] = table_[j];
    table_[j] = kEmpty;
    hole = j;
  }
}

FreeSlotBitmap::FreeSlotBitmap(uint32_t capacity)
    : words_((size_t{capacity} + 63) / 64, ~uint64_t{0}), free_(capacity) {
  if (capacity % 64 != 0) words_.back() = (uint64_t{1} << (capacity % 64)) - 1;
}

uint32_t FreeSlotBitmap::Take() {
  while (!freed_.empty()) {
    const uint32_t slot = freed_.back();
    freed_.pop_back();
    if (!Contains(slot)) continue;  // marked used meanwhile
    Clear(slot);
    --free_;
    if (freed_.empty()) freed_.shrink_to_fit();  // a mass trim's stack goes
    return slot;
  }
  while (words_[cursor_] == 0) ++cursor_;  // free_ > 0 and the stack is empty: one is ahead
  const auto slot = static_cast<uint32_t>(cursor_ * 64 + std::countr_zero(words_[cursor_]));
  Clear(slot);
  --free_;
  return slot;
}

void FreeSlotBitmap::Put(uint32_t slot) {
  if (Contains(slot)) return;
  words_[slot / 64] |= uint64_t{1} << (slot % 64);
  ++free_;
  if (slot / 64 < cursor_) freed_.push_back(slot);  // else the cursor finds it
}

void FreeSlotBitmap::Remove(uint32_t slot) {
  if (!Contains(slot)) return;
  Clear(slot);
  --free_;
}

}  // namespace cachecore
