// The flush epoch each 4 KiB block was last written in, in one byte a block
// (it was eight). The table answers the slot table's two questions exactly,
// "was the block written before flush epoch X began" for the epochs still
// asked about, from an epoch kept modulo 255 plus a sweep that runs as
// flushes begin:
// - 0 means written before every epoch asked about (stable, or older);
// - otherwise the byte is (E mod 255) + 1, decoded as the latest epoch not
//   after the current one with that remainder, which is E while
//   E > current - 255.
// BeginFlush sweeps a 64th of the blocks at each epoch, so each block is
// swept every 64 epochs: a block written before the completed flush
// becomes 0, and one written more than 128 epochs before the current one
// (its flushes keep failing) is moved forward to current - 128. Neither
// changes any answer the slot table gives: a stable block stays stable, and
// every epoch a caller asks about is the current one or the one before it
// (writers of older epochs are waited for; see SlotTable::BeginFlush), and
// no flush older than the current one completes later (the engine has one
// flush in flight at a time: a flush of epoch x completing after the byte
// of a block written in x-1 was moved past x would call it unstable). So
// no byte is more than 192 epochs old when decoded.
//
// Bytes are read and written with relaxed atomics: the sweep runs without
// the blocks' stripes and changes a byte only if it still holds what it
// read (a writer's newer epoch wins). Not a public header.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cachecore {

class BlockEpochs {
 public:
  static constexpr uint32_t kSweepParts = 64;

  explicit BlockEpochs(size_t blocks) : bytes_(blocks, 0) {}

  // The epoch block `i` was last written in (0: before any asked about),
  // `current` being the epoch flushes have started.
  uint64_t Get(size_t i, uint64_t current) const { return Decode(Load(i), current); }
  void Set(size_t i, uint64_t epoch) { Store(i, Encode(epoch)); }
  // Sweeps part `current` % kSweepParts; `completed`: flushes completed.
  void Sweep(uint64_t current, uint64_t completed);
  size_t MemoryBytes() const { return bytes_.capacity(); }

 private:
  static uint8_t Encode(uint64_t epoch) {
    return epoch == 0 ? 0 : static_cast<uint8_t>(epoch % 255 + 1);
  }
  static uint64_t Decode(uint8_t byte, uint64_t current) {
    if (byte == 0) return 0;
    const uint64_t remainder = byte - 1u;
    return current - (current + 255 - remainder) % 255;
  }
  uint8_t Load(size_t i) const {
    return std::atomic_ref<uint8_t>(const_cast<uint8_t&>(bytes_[i])).load(std::memory_order_relaxed);
  }
  void Store(size_t i, uint8_t byte) {
    std::atomic_ref<uint8_t>(bytes_[i]).store(byte, std::memory_order_relaxed);
  }

  std::vector<uint8_t> bytes_;
};

}  // namespace cachecore
