#include "cachecore/engine/cache_mode.h"

#include <cctype>
#include <cstdlib>

namespace cachecore {

const char* CacheModeName(CacheMode mode) {
  switch (mode) {
    case CacheMode::kWriteThrough: return "writethrough";
    case CacheMode::kWriteBack: return "writeback";
    case CacheMode::kWriteAround: return "writearound";
    case CacheMode::kReadOnly: return "readonly";
    case CacheMode::kPassThrough: return "passthrough";
  }
  return "?";
}

Result<CacheMode> ParseCacheMode(const std::string& text) {
  struct Name { const char* long_name; const char* short_name; CacheMode mode; };
  static const Name kNames[] = {
      {"writethrough", "wt", CacheMode::kWriteThrough}, {"writeback", "wb", CacheMode::kWriteBack},
      {"writearound", "wa", CacheMode::kWriteAround},   {"readonly", "ro", CacheMode::kReadOnly},
      {"passthrough", "pt", CacheMode::kPassThrough},
  };
  for (const Name& n : kNames) {
    if (text == n.long_name || text == n.short_name) return n.mode;
  }
  return Status::InvalidArgument("unknown cache mode '" + text +
                                 "' (use writethrough, writeback, writearound, readonly, "
                                 "passthrough, or wt, wb, wa, ro, pt)");
}

Result<uint64_t> ParseSize(const std::string& text) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) {
    return Status::InvalidArgument("'" + text + "' is not a size (examples: 4096, 64K, 1M, 2G)");
  }
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  std::string suffix(end);
  if (suffix.size() == 2 && (suffix[1] == 'B' || suffix[1] == 'b')) suffix.pop_back();
  if (suffix == "iB" || suffix.size() > 1) {
    return Status::InvalidArgument("'" + text + "' has an unknown size suffix (use K, M, G or T)");
  }
  unsigned shift = 0;
  if (!suffix.empty()) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default:
        return Status::InvalidArgument("'" + text + "' has an unknown size suffix (use K, M, G or T)");
    }
  }
  if (errno == ERANGE || (shift > 0 && value > (UINT64_MAX >> shift))) {
    return Status::InvalidArgument("'" + text + "' is too large");
  }
  return static_cast<uint64_t>(value) << shift;
}

}  // namespace cachecore
