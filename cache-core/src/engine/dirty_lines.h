// The dirty lines in origin order, for the cleaner (which writes back in
// origin order) and the throttle: a compressed bitmap of origin lines.
// Lines are grouped by their high bits into chunks of 65,536; a chunk
// holds its lines as a sorted array of 16-bit offsets (2 bytes a line)
// until it has more than 4,096, then as an 8 KiB bitmap. A std::map node
// per dirty line cost 64 bytes. Not thread-safe: the slot table guards it.
// Not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace cachecore {

class DirtyLineSet {
 public:
  // True when `line` was not in the set.
  bool Insert(uint64_t line);
  // Fills an empty set (a warm start) with lines in any order, each once,
  // without sorting them: `each_line` visits every line, and is called
  // twice (a count by chunk, then each chunk's offsets).
  using LineVisitor = std::function<void(uint64_t)>;
  void Load(const std::function<void(const LineVisitor&)>& each_line);
  // True when `line` was in the set.
  bool Erase(uint64_t line);
  bool Contains(uint64_t line) const;
  size_t size() const { return size_; }
  // Appends the lines at or after `from` and before `end`, in order, to
  // `out` until it holds `max` lines.
  void AppendRange(uint64_t from, uint64_t end, size_t max, std::vector<uint64_t>& out) const;
  // Whether any line in [from, end) is in the set.
  bool AnyIn(uint64_t from, uint64_t end) const;
  // Heap bytes held, the map's nodes estimated.
  size_t MemoryBytes() const;

 private:
  struct Chunk {
    bool bitmap = false;
    uint32_t count = 0;
    // Sorted offsets, or kChunkLines bits (4096 words of 16 bits).
    std::vector<uint16_t> data;
  };
  static void ToBitmap(Chunk& c);
  static void ToArray(Chunk& c);
  static bool ChunkInsert(Chunk& c, uint16_t offset);
  static bool ChunkErase(Chunk& c, uint16_t offset);
  static bool ChunkContains(const Chunk& c, uint16_t offset);
  // Whether the chunk holds an offset in [from, end).
  static bool ChunkAny(const Chunk& c, uint32_t from, uint32_t end);
  // Appends offsets in [from, end) until `out` holds `max` lines.
  static void ChunkAppend(const Chunk& c, uint64_t base, uint32_t from, uint32_t end, size_t max,
                          std::vector<uint64_t>& out);

  std::map<uint64_t, Chunk> chunks_;  // by line >> 16
  size_t size_ = 0;
};

}  // namespace cachecore
