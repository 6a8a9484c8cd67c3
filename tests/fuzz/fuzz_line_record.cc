// Fuzz target: line records as a damaged metadata store could hold them.
#include <string>

#include "cachecore/metadata/metadata_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachecore;
  std::string value(reinterpret_cast<const char*>(data), size);
  Result<LineRecord> r = DecodeLineRecord(value);
  if (r.ok() && EncodeLineRecord(r.value()) != value) __builtin_trap();  // must round-trip
  return 0;
}
