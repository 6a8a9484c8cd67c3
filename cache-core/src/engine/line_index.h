// The compact per-slot tables under the slot table: which origin line each
// slot holds (40 bits), the index from origin line to slot, and the free
// slots. Each costs a few bytes per slot, where node-based containers cost
// tens (docs/design.md, "RAM per line"). Not thread-safe: the slot table
// guards them. Not a public header.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace cachecore {

constexpr uint64_t kNoLine = UINT64_MAX;

// The origin line of every slot: in 4 bytes when the origin's lines all
// fit (up to 2^32 - 1 lines: 16 TiB in 4 KiB lines, 256 TiB in 64 KiB),
// in 5 otherwise; origin lines are below kMaxOriginLines (an origin of
// 4 PiB in 4 KiB lines).
class PackedLines {
 public:
  static constexpr uint64_t kMaxOriginLines = (uint64_t{1} << 40) - 1;

  // `origin_lines`: how many lines the origin has (the last may be partial).
  PackedLines(uint32_t capacity, uint64_t origin_lines)
      : wide_(origin_lines >= UINT32_MAX), low_(capacity, UINT32_MAX), high_(wide_ ? capacity : 0, 0xff) {}

  // kNoLine when the slot holds no line.
  uint64_t Get(uint32_t slot) const {
    if (!wide_) return low_[slot] == UINT32_MAX ? kNoLine : low_[slot];
    const uint64_t v = (uint64_t{high_[slot]} << 32) | low_[slot];
    return v == kMaxOriginLines ? kNoLine : v;
  }
  // `line` is kNoLine or below the origin's line count.
  void Set(uint32_t slot, uint64_t line) {
    const uint64_t v = line == kNoLine ? kMaxOriginLines : line;
    low_[slot] = static_cast<uint32_t>(v);
    if (wide_) high_[slot] = static_cast<uint8_t>(v >> 32);
  }
  // Whether line numbers below `origin_lines` fit.
  bool Holds(uint64_t origin_lines) const { return wide_ ? origin_lines < kMaxOriginLines : origin_lines < UINT32_MAX; }
  size_t MemoryBytes() const { return low_.capacity() * 4 + high_.capacity(); }
  // The arrays as bytes, for a snapshot to be written from or read into
  // (the high bytes empty when the lines fit in 4).
  std::span<uint8_t> LowBytes() { return {reinterpret_cast<uint8_t*>(low_.data()), low_.size() * 4}; }
  std::span<uint8_t> HighBytes() { return {high_.data(), high_.size()}; }
  void Clear() {
    std::fill(low_.begin(), low_.end(), UINT32_MAX);
    std::fill(high_.begin(), high_.end(), uint8_t{0xff});
  }

 private:
  bool wide_;
  std::vector<uint32_t> low_;
  std::vector<uint8_t> high_;
};

// Origin line -> slot: an open-addressed table of 32-bit entries with
// linear probing and deletion by backward shift (no tombstones). An entry
// is a slot number with, in the bits a slot does not need, a fingerprint
// of the line's hash: most probes are told apart without reading the
// line of the slot (a cache miss). The keys are the lines `lines` holds:
// a slot's line is set before it is inserted and cleared after it is erased.
class LineIndex {
 public:
  static constexpr uint32_t kNotFound = UINT32_MAX;

  LineIndex(uint32_t capacity, const PackedLines& lines);

  uint32_t Find(uint64_t line) const;
  // False when `line` is indexed already (to any slot).
  bool Insert(uint64_t line, uint32_t slot);
  // Inserts the lines of `slots` (each slot's line set), fetching the
  // table's entries ahead (a warm start: one cache miss at a time cost
  // 200 ns a line). Returns the first slot whose line was indexed already,
  // or kNotFound.
  uint32_t InsertAll(const std::vector<uint32_t>& slots);
  // Removes `line`; nothing when it is not indexed.
  void Erase(uint64_t line);
  size_t size() const { return size_; }
  size_t MemoryBytes() const { return table_.capacity() * 4; }

 private:
  uint64_t Hash(uint64_t line) const;
  size_t Home(uint64_t hash) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(hash) * table_.size()) >> 64);
  }
  uint32_t Fingerprint(uint64_t hash) const {
    return static_cast<uint32_t>(hash) & fingerprint_mask_;
  }
  size_t Next(size_t i) const { return i + 1 == table_.size() ? 0 : i + 1; }
  // The position of `line`'s entry, or of the empty entry that ends its probe.
  size_t Probe(uint64_t line, uint64_t hash) const;

  const PackedLines& lines_;
  uint32_t slot_bits_;
  uint32_t slot_mask_;
  uint32_t fingerprint_mask_;
  std::vector<uint32_t> table_;
  size_t size_ = 0;
};

// The free slots: a bitmap (a bit a slot) and a stack of slots freed since
// the start. A slot freed is taken again first (the stack), then the
// slots free from the start in ascending order (a fresh cache fills its
// device front to back) by a cursor that only moves forward: each take is
// amortized constant time, also when the free slots are few and scattered.
class FreeSlotBitmap {
 public:
  // All `capacity` slots free.
  explicit FreeSlotBitmap(uint32_t capacity);

  size_t size() const { return free_; }
  bool empty() const { return free_ == 0; }
  bool Contains(uint32_t slot) const { return (words_[slot / 64] >> (slot % 64)) & 1; }
  // REQUIRES: !empty().
  uint32_t Take();
  void Put(uint32_t slot);
  // Marks `slot` used (a warm start adopting its record).
  void Remove(uint32_t slot);
  size_t MemoryBytes() const { return words_.capacity() * 8 + freed_.capacity() * 4; }

 private:
  void Clear(uint32_t slot) { words_[slot / 64] &= ~(uint64_t{1} << (slot % 64)); }

  std::vector<uint64_t> words_;
  size_t free_;
  size_t cursor_ = 0;  // a word index: no free slot before it but those on the stack
  // Freed slots behind the cursor, newest last; one marked used meanwhile
  // (Remove) is skipped: its bit is clear.
  std::vector<uint32_t> freed_;
};

}  // namespace cachecore
