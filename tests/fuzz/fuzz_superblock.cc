// Fuzz target: the superblock and identity decoders, fed what a damaged or
// foreign cache device could hold.
#include <cstring>
#include <string>

#include "cachecore/block_device.h"
#include "cachecore/superblock.h"

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
  return 0;
}
