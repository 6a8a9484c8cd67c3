// MemoryDevice: a sparse in-memory block device. Pages are allocated on first
// write, so a multi-terabyte origin costs only what is written (trace replay
// uses this). Discard frees pages. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "cachecore/devices/block_device.h"

namespace cachecore {

// size_bytes: a multiple of 512. name: becomes identity() as "mem:<name>".
std::unique_ptr<BlockDevice> NewMemoryDevice(uint64_t size_bytes, const std::string& name);

}  // namespace cachecore
