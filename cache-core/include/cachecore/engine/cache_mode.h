// Cache modes and their names, as the CLI and the metadata store spell them.
#pragma once

#include <string>

#include "cachecore/base/status.h"

namespace cachecore {

enum class CacheMode {
  kWriteThrough,  // writes go to origin and cache; the origin is always current
  kWriteBack,     // writes go to the cache only (dirty) until cleaned
  kWriteAround,   // writes go to the origin; cached copies are updated, never allocated
  kReadOnly,      // writes go to the origin and drop cached copies; reads allocate
  kPassThrough,   // the cache is not used (cached copies of written blocks are dropped)
};

// "writethrough", "writeback", ...
const char* CacheModeName(CacheMode mode);
// Accepts the long names and wt, wb, wa, ro, pt; anything else is
// kInvalidArgument with a message that lists what is accepted.
Result<CacheMode> ParseCacheMode(const std::string& text);

// "4K", "1M", "512", "2G": bytes with an optional K/M/G/T suffix (powers of 1024).
Result<uint64_t> ParseSize(const std::string& text);

}  // namespace cachecore
