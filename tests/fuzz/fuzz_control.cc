// Fuzz target: the control protocol's lines, both ways (what a client sends
// the daemon, and what the CLI reads back).
#include <string>

#include "control.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string line(reinterpret_cast<const char*>(data), size);
  (void)cachectl::ParseRequestLine(line);
  cachectl::ReplyLine r = cachectl::ParseReplyLine(line);
  if (r.kind == cachectl::ReplyLine::kError && r.exit_code == 0) __builtin_trap();  // never "failed with 0"
  return 0;
}
