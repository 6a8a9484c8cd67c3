// Fuzz target: one line of a block trace (cachectl replay reads files users
// give it).
#include <string>

#include "cachecore/planning/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cachecore::TraceRecord r;
  (void)cachecore::ParseTraceLine(std::string(reinterpret_cast<const char*>(data), size), &r);
  return 0;
}
