// DirtyMap: which regions of the origin may have newer data on the cache
// than on the origin, kept on the cache device apart from the metadata
// store. When the store is damaged it still tells which origin ranges may
// be stale (cachectl check, cachectl rebuild).
//
// Rule: when a flush completes (the client's FLUSH, a FUA write, a clean
// shutdown), the bit of every region with dirty data is durable: the map's
// changed pages are written before the cache device is flushed, and that
// flush comes before the store's sync. So every dirty write a client was
// promised is covered. Bits are cleared lazily (a set bit may outlive its
// dirty lines: "may be stale", never "missed").
//
// On the cache device, at kDirtyMapOffset, pages of 4 KiB (little-endian):
//   0  u32  CRC32C of bytes 4..4095, seeded with the CRC32C of the cache UUID
//           (format 3: of the UUID, then the region size as a u64)
//   4  u32  page index
//   8  bits, region r at bit (r % kRegionsPerPage) of page r / kRegionsPerPage
// Regions are a power-of-two number of lines, as few as keep the count at or
// below kMaxDirtyRegions.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cachecore/devices/block_device.h"
#include "cachecore/metadata/superblock.h"

namespace cachecore {

constexpr uint64_t kDirtyMapOffset = 64 * 1024;
constexpr uint32_t kDirtyMapPageSize = 4096;
constexpr uint32_t kRegionsPerPage = (kDirtyMapPageSize - 8) * 8;
constexpr uint32_t kMaxDirtyRegions = 256 * 1024;

// Byte ranges of the origin (format 3: of the line space): {offset, length}.
using OriginRanges = std::vector<std::pair<uint64_t, uint64_t>>;

class DirtyMap {
 public:
  // Regions over the line space in use (`line_space` bytes: a cache of
  // format 2, its origin's size; Superblock::LineSpace()).
  DirtyMap(const CacheIdentity& identity, uint64_t line_space);

  uint64_t region_size() const { return region_size_; }
  uint32_t page_count() const { return pages_; }

  // A line became dirty / clean. Not thread-safe: the engine calls these
  // under its mutex. The map keeps a bit per region, not a count: the
  // caller, which keeps the dirty lines, says whether `line`'s region
  // still has any (RegionLines) once `line` is clean.
  void LineDirty(uint64_t line);
  void LineClean(uint64_t line, bool region_still_dirty);
  // The lines [first, end) of `line`'s region.
  std::pair<uint64_t, uint64_t> RegionLines(uint64_t line) const {
    const uint64_t first = line / lines_per_region_ * lines_per_region_;
    return {first, first + lines_per_region_};
  }

  // The pages changed since the last call (every page with `all`), encoded
  // for the device: {device offset, 4 KiB}. Same locking as LineDirty.
  std::vector<std::pair<uint64_t, AlignedBuffer>> TakeChangedPages(bool all);
  // After a failed write: every page is written again next time.
  void MarkAllChanged() { page_changed_.assign(pages_, true); }
  // Heap bytes held (a bit per region and per page).
  size_t MemoryBytes() const { return (regions_ + pages_) / 8; }

  // Reads the map of the cache `identity` describes from `cache`: the origin
  // ranges that may be stale. kCorruption when a page fails its checksum.
  static Result<OriginRanges> ReadStaleRanges(BlockDevice* cache, const CacheIdentity& identity,
                                              uint64_t line_space);
  uint64_t line_space() const { return line_space_; }
  // Whether a map for (identity, line_space) would have this one's regions
  // and page checksums.
  bool SameGeometry(const CacheIdentity& identity, uint64_t line_space) const {
    return line_space == line_space_ && (identity.format_version >= 3 ? region_size_ : 0) == seeded_region_size_;
  }

 private:
  uint32_t RegionOf(uint64_t line) const { return static_cast<uint32_t>(line / lines_per_region_); }
  void EncodePage(uint32_t page, uint8_t* out) const;

  Uuid uuid_;
  uint64_t line_space_;
  uint64_t region_size_;
  uint64_t seeded_region_size_;  // format 3: region_size_; before, 0 (the CRC seed is the UUID's alone)
  uint64_t lines_per_region_;
  uint32_t regions_;
  uint32_t pages_;
  std::vector<bool> dirty_;  // per region: has a dirty line
  std::vector<bool> page_changed_;
};

}  // namespace cachecore
