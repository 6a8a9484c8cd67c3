// OpenFileDevice: a regular file or a block device opened with O_DIRECT, the
// way every origin and cache device on local storage is opened. io_uring by
// default (cachecore/devices/uring_device.h); libaio
// (cachecore/devices/aio_device.h) where the kernel has no io_uring or it is
// disabled (kernel.io_uring_disabled, a seccomp profile).
#pragma once

#include <memory>
#include <string>

#include "cachecore/devices/block_device.h"

namespace cachecore {

enum class IoBackend {
  kAuto,   // io_uring when this process may use it, else libaio
  kUring,  // io_uring or fail
  kAio,    // libaio
};

struct FileDeviceOptions {
  bool read_only = false;
  IoBackend backend = IoBackend::kAuto;
};

// Opens `path`. Fails with a message naming the path when it does not
// exist, is busy (a block device held by another program), cannot be opened
// for direct I/O, or has a size that is not a multiple of 512; with kUring,
// also when io_uring cannot be used, saying why.
Result<std::unique_ptr<BlockDevice>> OpenFileDevice(const std::string& path,
                                                    const FileDeviceOptions& options = {});

}  // namespace cachecore
