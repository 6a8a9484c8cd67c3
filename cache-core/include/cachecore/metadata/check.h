// CheckCache: verifies a cache offline, reading only: the superblock, its
// agreement with the metadata store and the origin, every line record, and
// the checksum of every cached block against the data on the cache device.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cachecore/crypto/cache_key.h"
#include "cachecore/devices/block_device.h"
#include "cachecore/metadata/metadata_store.h"

namespace cachecore {

struct CheckReport {
  std::string uuid;
  bool clean_shutdown = false;
  uint64_t lines = 0;            // occupied lines
  uint64_t dirty_lines = 0;
  uint64_t blocks_verified = 0;  // cached 4 KiB blocks whose data matches
  uint64_t clean_blocks_bad = 0; // fail their checksum; the origin has them (repaired on read)
  uint64_t dirty_blocks_bad = 0; // fail their checksum; only the cache had them: lost
  uint64_t unsettled_blocks = 0; // written since the last flush before a crash: settled at start
  std::vector<std::string> problems;  // one line each; empty when all is well
  // Origin byte ranges whose newest data is dirty and unreadable.
  std::vector<std::pair<uint64_t, uint64_t>> lost_ranges;
};

// Fails (kNotFound, kCorruption, kMismatch) only when the check cannot run
// at all; what it finds is in the report. An encrypted cache is checked
// with its key only (kMismatch without it, or with another).
Result<CheckReport> CheckCache(BlockDevice* origin, BlockDevice* cache, MetadataStore* store,
                               std::shared_ptr<const CacheKey> key = nullptr);

}  // namespace cachecore
