// A FIFO of slot numbers, each in as few bits as the largest slot needs
// (20 for a million slots, 24 for ten million), where a deque of 32-bit
// ones takes 4 bytes an entry: S3-FIFO's two rings hold an entry for
// every cached line, so this is a byte or more a line saved. Entries live
// in chunks of 4,096; one emptied chunk is kept for the next, so that a
// ring which pushes and pops at the same pace allocates nothing.
// Not thread-safe. Not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

namespace cachecore {

class SlotFifo {
 public:
  // Entries are below `capacity` (> 0).
  explicit SlotFifo(uint32_t capacity);

  void PushBack(uint32_t slot);
  // REQUIRES: not empty.
  uint32_t Front() const;
  void PopFront();
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t MemoryBytes() const { return (chunks_.size() + (spare_ ? 1 : 0)) * ChunkWords() * 8; }
  uint32_t bits() const { return bits_; }

 private:
  static constexpr size_t kChunkEntries = 4096;
  // A chunk's 64-bit words: its entries' bits and one more, so that an
  // entry is read and written as two whole words, never past the end.
  size_t ChunkWords() const { return kChunkEntries * bits_ / 64 + 1; }
  uint32_t Get(const uint64_t* chunk, size_t i) const;
  void Put(uint64_t* chunk, size_t i, uint32_t v) const;

  uint32_t bits_;
  uint64_t mask_;
  std::deque<std::unique_ptr<uint64_t[]>> chunks_;
  std::unique_ptr<uint64_t[]> spare_;
  size_t head_ = 0;  // the front's place in the first chunk
  size_t size_ = 0;
};

}  // namespace cachecore
