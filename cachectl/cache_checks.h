// What cache_commands.cc checks and shows, shared with the volume commands.
// Internal to the cachectl executable.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "cachecore/base/status.h"
#include "paths.h"

namespace cachectl {

// "a device that does not exist", "the same device twice", "a device in use
// by a cache" (as its origin, its cache or a volume's origin): caught before
// anything is opened for writing. `adding_to`: the cache a volume is added
// to (its own cache device is then no conflict).
cachecore::Status CheckDevices(const Dirs& dirs, const std::string& origin, const std::string& cache,
                               const std::string& adding_to = "");
// A RAM tier of `bytes` on this host: at most three quarters of its memory
// (the rest is the system's, the daemon's and RocksDB's). kInvalidArgument
// saying so; OK for 0 (off). The CLI asks before it sends a size, the
// daemon again before it takes one.
cachecore::Status CheckRamCacheFits(uint64_t bytes);
// Progress: a bar on a terminal, a line per tenth otherwise.
std::function<void(uint64_t, uint64_t)> ProgressPrinter(const std::string& what);

}  // namespace cachectl
