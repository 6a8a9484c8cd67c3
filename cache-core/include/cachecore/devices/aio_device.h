// AioDevice: a regular file or a block device opened with O_DIRECT and driven
// through Linux native AIO (libaio). One io_context per device; a completion
// thread reaps events, so many threads may each have many requests in flight,
// and a batch goes to the kernel in one io_submit.
#pragma once

#include <memory>
#include <string>

#include "cachecore/devices/block_device.h"

namespace cachecore {

struct AioOptions {
  unsigned queue_depth = 256;  // requests in flight at once on this device
  bool read_only = false;
};

// Opens `path`. Fails with a message naming the path when it does not exist,
// cannot be opened for direct I/O, or has a size that is not a multiple of 512.
Result<std::unique_ptr<BlockDevice>> OpenAioDevice(const std::string& path,
                                                   const AioOptions& options = {});

}  // namespace cachecore
