#include "slot_fifo.h"

#include <algorithm>
#include <bit>

namespace cachecore {

SlotFifo::SlotFifo(uint32_t capacity)
    : bits_(std::max<uint32_t>(1, static_cast<uint32_t>(std::bit_width(capacity - 1)))),
      mask_((uint64_t{1} << bits_) - 1) {}

uint32_t SlotFifo::Get(const uint64_t* chunk, size_t i) const {
  const size_t bit = i * bits_, word = bit / 64, shift = bit % 64;
  // The second word's part: a shift by 64 is undefined, so two steps.
  const uint64_t v = (chunk[word] >> shift) | ((chunk[word + 1] << 1) << (63 - shift));
  return static_cast<uint32_t>(v & mask_);
}

void SlotFifo::Put(uint64_t* chunk, size_t i, uint32_t v) const {
  const size_t bit = i * bits_, word = bit / 64, shift = bit % 64;
  chunk[word] = (chunk[word] & ~(mask_ << shift)) | (uint64_t{v} << shift);
  if (shift + bits_ > 64) {
    const size_t high = 64 - shift;  // bits already in the first word
    chunk[word + 1] = (chunk[word + 1] & ~(mask_ >> high)) | (uint64_t{v} >> high);
  }
}

void SlotFifo::PushBack(uint32_t slot) {
  const size_t at = head_ + size_;
  if (at == chunks_.size() * kChunkEntries) {
    chunks_.push_back(spare_ ? std::move(spare_) : std::make_unique<uint64_t[]>(ChunkWords()));
  }
  Put(chunks_[at / kChunkEntries].get(), at % kChunkEntries, slot);
  ++size_;
}

uint32_t SlotFifo::Front() const { return Get(chunks_.front().get(), head_); }

void SlotFifo::PopFront() {
  --size_;
  ++head_;
  if (size_ == 0 && head_ < kChunkEntries) {
    head_ = 0;  // empty: its one chunk is used again from the start
  } else if (head_ == kChunkEntries) {
    spare_ = std::move(chunks_.front());
    chunks_.pop_front();
    head_ = 0;
  }
}

}  // namespace cachecore
