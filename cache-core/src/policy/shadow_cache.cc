#include "policy/shadow_cache.h"

#include <bit>

#include "base/mix64.h"

namespace cachecore {

ShadowCache::ShadowCache(uint32_t lines, const S3FifoShape& shape, const GhostLayout& ghost)
    : lines_(lines),
      key_of_slot_(lines),
      table_(std::bit_ceil(2 * uint64_t{lines}), kEmpty),
      policy_(lines, shape, [this](uint32_t slot) { return key_of_slot_[slot]; }, ghost) {}

void ShadowCache::Access(uint64_t full_key) {
  const auto key = static_cast<uint32_t>(Mix64(full_key) >> 32);
  if (const uint16_t slot = Find(key); slot != kEmpty) {
    policy_.OnHit(slot);
    ++hits_;
    return;
  }
  uint32_t slot = used_;
  if (used_ < lines_) {
    ++used_;
  } else {
    const std::optional<uint32_t> victim =
        policy_.PickVictim(key, [](uint32_t) { return true; }, UINT64_MAX, UINT64_MAX);
    if (!victim) return;  // S3-FIFO always has one with every slot usable; not cached otherwise
    slot = *victim;
    policy_.OnRemove(slot);
    Erase(key_of_slot_[slot]);
  }
  key_of_slot_[slot] = key;
  Insert(key, static_cast<uint16_t>(slot));
  policy_.OnInsert(slot, key);
}

uint64_t ShadowCache::TakeHits() {
  const uint64_t hits = hits_;
  hits_ = 0;
  return hits;
}

size_t ShadowCache::MemoryBytes() const {
  return key_of_slot_.capacity() * sizeof(uint32_t) + table_.capacity() * sizeof(uint16_t) +
         policy_.MemoryBytes();
}

// The key is a hash already: its low bits place it (the sample went by the
// whole key's hash with another seed, so they are not skewed by it).
size_t ShadowCache::Home(uint32_t key) const { return key & (table_.size() - 1); }

uint16_t ShadowCache::Find(uint32_t key) const {
  for (size_t i = Home(key);; i = (i + 1) & (table_.size() - 1)) {
    if (table_[i] == kEmpty || key_of_slot_[table_[i]] == key) return table_[i];
  }
}

void ShadowCache::Insert(uint32_t key, uint16_t slot) {
  size_t i = Home(key);
  while (table_[i] != kEmpty) i = (i + 1) & (table_.size() - 1);
  table_[i] = slot;
}

// Knuth's deletion for linear probing: each later entry of the run moves
// into the hole when its home is not between the hole and it.
void ShadowCache::Erase(uint32_t key) {
  const size_t mask = table_.size() - 1;
  size_t hole = Home(key);
  while (key_of_slot_[table_[hole]] != key) hole = (hole + 1) & mask;
  for (size_t i = (hole + 1) & mask; table_[i] != kEmpty; i = (i + 1) & mask) {
    const size_t home = Home(key_of_slot_[table_[i]]);
    if (((i - home) & mask) >= ((i - hole) & mask)) {
      table_[hole] = table_[i];
      hole = i;
    }
  }
  table_[hole] = kEmpty;
}

}  // namespace cachecore
