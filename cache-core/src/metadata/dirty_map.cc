#include "cachecore/metadata/dirty_map.h"

#include <cstring>

#include "cachecore/metadata/checksum.h"

namespace cachecore {

namespace {

// From format 3 the seed takes the region size too: a page written for
// another line space (a volume added or removed, the superblock not yet
// saying so) fails its checksum rather than be read with the wrong regions.
uint32_t PageCrc(const Uuid& uuid, uint64_t seeded_region_size, const uint8_t* page) {
  uint32_t seed = Crc32c(uuid.data(), uuid.size());
  if (seeded_region_size != 0) seed = Crc32c(&seeded_region_size, sizeof(seeded_region_size), seed);
  return Crc32c(page + 4, kDirtyMapPageSize - 4, seed);
}

uint64_t RegionSizeFor(const CacheIdentity& id, uint64_t line_space) {
  const uint64_t lines = (line_space + id.line_size - 1) / id.line_size;
  uint64_t per_region = 1;
  while ((lines + per_region - 1) / per_region > kMaxDirtyRegions) per_region *= 2;
  return per_region * id.line_size;
}

}  // namespace

DirtyMap::DirtyMap(const CacheIdentity& identity, uint64_t line_space)
    : uuid_(identity.uuid),
      line_space_(line_space),
      region_size_(RegionSizeFor(identity, line_space)),
      seeded_region_size_(identity.format_version >= 3 ? region_size_ : 0),
      lines_per_region_(region_size_ / identity.line_size),
      regions_(static_cast<uint32_t>((line_space + region_size_ - 1) / region_size_)),
      pages_((regions_ + kRegionsPerPage - 1) / kRegionsPerPage),
      dirty_(regions_, false),
      page_changed_(pages_, false) {}

void DirtyMap::LineDirty(uint64_t line) {
  const uint64_t r = line / lines_per_region_;
  if (r >= regions_ || dirty_[r]) return;  // past the line space: in no volume, nothing to mark
  dirty_[r] = true;
  page_changed_[r / kRegionsPerPage] = true;
}

void DirtyMap::LineClean(uint64_t line, bool region_still_dirty) {
  const uint64_t r = line / lines_per_region_;
  if (region_still_dirty || r >= regions_ || !dirty_[r]) return;
  dirty_[r] = false;
  page_changed_[r / kRegionsPerPage] = true;
}

void DirtyMap::EncodePage(uint32_t page, uint8_t* out) const {
  std::memset(out, 0, kDirtyMapPageSize);
  std::memcpy(out + 4, &page, 4);
  uint32_t first = page * kRegionsPerPage;
  for (uint32_t i = 0; i < kRegionsPerPage && first + i < regions_; ++i) {
    if (dirty_[first + i]) out[8 + i / 8] |= static_cast<uint8_t>(1u << (i % 8));
  }
  uint32_t crc = PageCrc(uuid_, seeded_region_size_, out);
  std::memcpy(out, &crc, 4);
}

std::vector<std::pair<uint64_t, AlignedBuffer>> DirtyMap::TakeChangedPages(bool all) {
  std::vector<std::pair<uint64_t, AlignedBuffer>> out;
  for (uint32_t p = 0; p < pages_; ++p) {
    if (!all && !page_changed_[p]) continue;
    AlignedBuffer buf(kDirtyMapPageSize);
    EncodePage(p, buf.data());
    out.emplace_back(kDirtyMapOffset + uint64_t{p} * kDirtyMapPageSize, std::move(buf));
    page_changed_[p] = false;
  }
  return out;
}

Result<OriginRanges> DirtyMap::ReadStaleRanges(BlockDevice* cache, const CacheIdentity& identity,
                                               uint64_t line_space) {
  DirtyMap geometry(identity, line_space);
  AlignedBuffer pages(size_t{geometry.pages_} * kDirtyMapPageSize);
  CACHECORE_RETURN_IF_ERROR(cache->Read(kDirtyMapOffset, pages.data(), pages.size()));
  OriginRanges ranges;
  for (uint32_t p = 0; p < geometry.pages_; ++p) {
    const uint8_t* page = pages.data() + size_t{p} * kDirtyMapPageSize;
    uint32_t crc = 0, index = 0;
    std::memcpy(&crc, page, 4);
    std::memcpy(&index, page + 4, 4);
    if (crc != PageCrc(identity.uuid, geometry.seeded_region_size_, page) || index != p) {
      return Status::Corruption("dirty-region map page " + std::to_string(p) + " fails its checksum");
    }
    uint32_t first = p * kRegionsPerPage;
    for (uint32_t i = 0; i < kRegionsPerPage && first + i < geometry.regions_; ++i) {
      if (!(page[8 + i / 8] & (1u << (i % 8)))) continue;
      uint64_t at = uint64_t{first + i} * geometry.region_size_;
      uint64_t len = std::min(geometry.region_size_, line_space - at);
      if (!ranges.empty() && ranges.back().first + ranges.back().second == at) {
        ranges.back().second += len;
      } else {
        ranges.emplace_back(at, len);
      }
    }
  }
  return ranges;
}

}  // namespace cachecore
