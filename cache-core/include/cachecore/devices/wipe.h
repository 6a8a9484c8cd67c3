// WipeDevice: leaves no data readable on a device: discards it all, then
// reads it back and overwrites with zeros whatever still reads non-zero (a
// device without discard, or one whose discarded blocks keep their data).
// cachectl detach --wipe runs it on the cache device.
#pragma once

#include <cstdint>
#include <functional>

#include "cachecore/devices/block_device.h"

namespace cachecore {

struct WipeReport {
  bool discarded = false;            // the device took the discard
  uint64_t bytes_overwritten = 0;    // zeros written where data was left
};

// `progress(done, total)` is called as the read-back advances. Durable when
// it returns OK (the device is flushed).
Result<WipeReport> WipeDevice(BlockDevice* device,
                              const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace cachecore
