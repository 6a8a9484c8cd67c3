#include "engine/dirty_lines.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace cachecore {

namespace {
constexpr uint32_t kChunkBits = 16;
constexpr uint64_t kChunkLines = uint64_t{1} << kChunkBits;
constexpr uint32_t kBitmapWords = kChunkLines / 16;
// Past this many lines a bitmap is smaller than the array; below half of
// it a bitmap goes back to an array (not back and forth at the edge).
constexpr uint32_t kToBitmap = 4096, kToArray = 2048;
// A map node's bytes: three pointers, a colour, the key and the chunk.
constexpr size_t kNodeBytes = 32 + sizeof(uint64_t) + 40;

uint64_t ChunkOf(uint64_t line) { return line >> kChunkBits; }
uint16_t OffsetOf(uint64_t line) { return static_cast<uint16_t>(line & (kChunkLines - 1)); }
bool BitSet(const std::vector<uint16_t>& bits, uint32_t offset) {
  return (bits[offset / 16] >> (offset % 16)) & 1;
}
}  // namespace

void DirtyLineSet::ToBitmap(Chunk& c) {
  std::vector<uint16_t> bits(kBitmapWords, 0);
  for (uint16_t o : c.data) bits[o / 16] |= static_cast<uint16_t>(1u << (o % 16));
  c.data.swap(bits);
  c.bitmap = true;
}

void DirtyLineSet::ToArray(Chunk& c) {
  std::vector<uint16_t> offsets;
  offsets.reserve(c.count);
  for (uint32_t o = 0; o < kChunkLines; ++o) {
    if (BitSet(c.data, o)) offsets.push_back(static_cast<uint16_t>(o));
  }
  c.data.swap(offsets);
  c.bitmap = false;
}

bool DirtyLineSet::ChunkInsert(Chunk& c, uint16_t offset) {
  if (c.bitmap) {
    if (BitSet(c.data, offset)) return false;
    c.data[offset / 16] |= static_cast<uint16_t>(1u << (offset % 16));
  } else {
    auto it = std::lower_bound(c.data.begin(), c.data.end(), offset);
    if (it != c.data.end() && *it == offset) return false;
    if (c.data.size() == c.data.capacity()) {  // grow by a quarter, not double
      const size_t at = it - c.data.begin();
      c.data.reserve(c.data.size() + c.data.size() / 4 + 4);
      it = c.data.begin() + at;
    }
    c.data.insert(it, offset);
    if (c.data.size() > kToBitmap) ToBitmap(c);
  }
  ++c.count;
  return true;
}

void DirtyLineSet::Load(const std::function<void(const LineVisitor&)>& each_line) {
  std::vector<uint32_t> first;  // per chunk: its lines' count, then where they start
  each_line([&](uint64_t line) {
    if (ChunkOf(line) >= first.size()) first.resize(ChunkOf(line) + 1, 0);
    ++first[ChunkOf(line)];
  });
  uint32_t total = 0;
  for (uint32_t& n : first) total += std::exchange(n, total);
  std::vector<uint16_t> offsets(total);
  std::vector<uint32_t> next = first;
  each_line([&](uint64_t line) { offsets[next[ChunkOf(line)]++] = OffsetOf(line); });
  for (uint64_t id = 0; id < first.size(); ++id) {
    const auto begin = offsets.begin() + first[id], end = offsets.begin() + next[id];
    if (begin == end) continue;
    Chunk c;
    c.count = static_cast<uint32_t>(end - begin);
    if (c.count > kToBitmap) {
      c.bitmap = true;
      c.data.assign(kBitmapWords, 0);
      for (auto it = begin; it != end; ++it) c.data[*it / 16] |= static_cast<uint16_t>(1u << (*it % 16));
    } else {
      c.data.assign(begin, end);
      std::sort(c.data.begin(), c.data.end());
    }
    chunks_.emplace_hint(chunks_.end(), id, std::move(c));
    size_ += end - begin;
  }
}

bool DirtyLineSet::ChunkErase(Chunk& c, uint16_t offset) {
  if (c.bitmap) {
    if (!BitSet(c.data, offset)) return false;
    c.data[offset / 16] &= static_cast<uint16_t>(~(1u << (offset % 16)));
    if (--c.count < kToArray) ToArray(c);
    return true;
  }
  auto it = std::lower_bound(c.data.begin(), c.data.end(), offset);
  if (it == c.data.end() || *it != offset) return false;
  c.data.erase(it);
  --c.count;
  if (c.data.capacity() > 2 * c.data.size() + 16) c.data.shrink_to_fit();
  return true;
}

bool DirtyLineSet::ChunkContains(const Chunk& c, uint16_t offset) {
  if (c.bitmap) return BitSet(c.data, offset);
  return std::binary_search(c.data.begin(), c.data.end(), offset);
}

void DirtyLineSet::ChunkAppend(const Chunk& c, uint64_t base, uint32_t from, uint32_t end,
                               size_t max, std::vector<uint64_t>& out) {
  if (!c.bitmap) {
    for (auto it = std::lower_bound(c.data.begin(), c.data.end(), from);
         it != c.data.end() && *it < end && out.size() < max; ++it) {
      out.push_back(base + *it);
    }
    return;
  }
  for (uint32_t o = from; o < end && out.size() < max;) {
    const uint16_t word = static_cast<uint16_t>(c.data[o / 16] >> (o % 16));
    if (word == 0) {
      o = (o / 16 + 1) * 16;
      continue;
    }
    o += static_cast<uint32_t>(std::countr_zero(word));
    if (o < end) out.push_back(base + o);
    ++o;
  }
}

bool DirtyLineSet::Insert(uint64_t line) {
  if (!ChunkInsert(chunks_[ChunkOf(line)], OffsetOf(line))) return false;
  ++size_;
  return true;
}

bool DirtyLineSet::Erase(uint64_t line) {
  auto it = chunks_.find(ChunkOf(line));
  if (it == chunks_.end() || !ChunkErase(it->second, OffsetOf(line))) return false;
  if (it->second.count == 0) chunks_.erase(it);
  --size_;
  return true;
}

bool DirtyLineSet::Contains(uint64_t line) const {
  auto it = chunks_.find(ChunkOf(line));
  return it != chunks_.end() && ChunkContains(it->second, OffsetOf(line));
}

void DirtyLineSet::AppendRange(uint64_t from, uint64_t end, size_t max,
                               std::vector<uint64_t>& out) const {
  for (auto it = chunks_.lower_bound(ChunkOf(from)); it != chunks_.end() && out.size() < max; ++it) {
    const uint64_t base = it->first << kChunkBits;
    if (base >= end) break;
    const uint32_t lo = from > base ? static_cast<uint32_t>(from - base) : 0;
    const uint32_t hi = end - base < kChunkLines ? static_cast<uint32_t>(end - base)
                                                 : static_cast<uint32_t>(kChunkLines);
    ChunkAppend(it->second, base, lo, hi, max, out);
  }
}

bool DirtyLineSet::ChunkAny(const Chunk& c, uint32_t from, uint32_t end) {
  if (from == 0 && end == kChunkLines) return c.count > 0;
  if (!c.bitmap) {
    auto it = std::lower_bound(c.data.begin(), c.data.end(), from);
    return it != c.data.end() && *it < end;
  }
  for (uint32_t o = from; o < end; o = (o / 16 + 1) * 16) {
    uint32_t word = c.data[o / 16] >> (o % 16);
    if (end - o < 16) word &= (1u << (end - o)) - 1;
    if (word != 0) return true;
  }
  return false;
}

bool DirtyLineSet::AnyIn(uint64_t from, uint64_t end) const {
  for (auto it = chunks_.lower_bound(ChunkOf(from)); it != chunks_.end(); ++it) {
    const uint64_t base = it->first << kChunkBits;
    if (base >= end) break;
    const uint32_t lo = from > base ? static_cast<uint32_t>(from - base) : 0;
    const uint32_t hi = end - base < kChunkLines ? static_cast<uint32_t>(end - base)
                                                 : static_cast<uint32_t>(kChunkLines);
    if (ChunkAny(it->second, lo, hi)) return true;
  }
  return false;
}

size_t DirtyLineSet::MemoryBytes() const {
  size_t bytes = 0;
  for (const auto& [key, chunk] : chunks_) bytes += kNodeBytes + chunk.data.capacity() * 2;
  return bytes;
}

}  // namespace cachecore
