// Fuzz target: what is read back from the head of a cache device (the
// superblock, the sync mark, a dirty-region map page) and the identity
// record of the metadata store, fed what a damaged or foreign device holds.
#include <cstring>
#include <string>

#include "cachecore/devices/block_device.h"
#include "cachecore/metadata/checksum.h"
#include "cachecore/metadata/dirty_map.h"
#include "cachecore/devices/memory_device.h"
#include "cachecore/metadata/superblock.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachecore;
  uint8_t block[kSuperblockSize] = {};
  std::memcpy(block, data, std::min<size_t>(size, kSuperblockSize));
  if (size >= 12) std::memcpy(block, "CACHECTL", 8);  // get past the magic often
  Result<Superblock> sb = DecodeSuperblock(block);
  if (sb.ok()) {
    uint8_t again[kSuperblockSize];
    EncodeSuperblock(sb.value(), again);
    Result<Superblock> back = DecodeSuperblock(again);
    if (!back.ok() || DescribeIdentityDifference(sb->identity, back->identity, "a", "b") != "") {
      __builtin_trap();  // an encode/decode round trip must be exact
    }
  }
  (void)DecodeIdentity(std::string(reinterpret_cast<const char*>(data), size));

  // The same bytes as a sync mark and as the first dirty-map page of a
  // small cache (one page: the origin is at most 128 MiB of 4 KiB lines).
  CacheIdentity id;
  id.line_size = 4096;
  id.origin_size = (1 + (size % 32768)) * 4096;
  (void)DecodeSyncMark(id.uuid, block);
  static std::unique_ptr<BlockDevice> device = NewMemoryDevice(kDirtyMapOffset + kDirtyMapPageSize, "fuzz");
  AlignedBuffer page(kDirtyMapPageSize);
  std::memcpy(page.data(), block, kDirtyMapPageSize);
  if (size % 2 == 0) {  // often a page that passes its checksum, to reach the bits
    uint32_t index = 0, crc = 0;
    std::memcpy(page.data() + 4, &index, 4);
    crc = Crc32c(page.data() + 4, kDirtyMapPageSize - 4, Crc32c(id.uuid.data(), id.uuid.size()));
    std::memcpy(page.data(), &crc, 4);
  }
  if (device->Write(kDirtyMapOffset, page.data(), kDirtyMapPageSize).ok()) {
    Result<OriginRanges> ranges = DirtyMap::ReadStaleRanges(device.get(), id, id.origin_size);
    for (auto [at, len] : ranges.ok() ? ranges.value() : OriginRanges{}) {
      if (at + len > id.origin_size) __builtin_trap();  // a range beyond the origin
    }
  }
  return 0;
}
