// UringDevice: a regular file or a block device opened with O_DIRECT and
// driven through io_uring. A synchronous caller submits its batch on a ring
// of its own thread and waits there: the kernel wakes the caller itself,
// with no completion thread and no waiter shared between callers.
#pragma once

#include <memory>
#include <string>

#include "cachecore/devices/block_device.h"

namespace cachecore {

// OK when this process can set up an io_uring; otherwise why not (no
// io_uring in the kernel, or disabled by sysctl or seccomp). Checked once.
Status UringUsable();

// Opens `path` (see OpenFileDevice for the errors).
Result<std::unique_ptr<BlockDevice>> OpenUringDevice(const std::string& path, bool read_only = false);

}  // namespace cachecore
