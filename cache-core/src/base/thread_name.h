// Names the calling thread (as `top -H`, perf and /proc/PID/task/*/comm
// show it), so an operator can tell the engine's threads apart. Linux keeps
// 15 characters. Not a public header.
#pragma once

namespace cachecore {

void NameThisThread(const char* name);

}  // namespace cachecore
