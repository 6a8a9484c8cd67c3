#include "cachecore/devices/file_device.h"

#include "cachecore/devices/aio_device.h"
#include "cachecore/devices/uring_device.h"

namespace cachecore {

Result<std::unique_ptr<BlockDevice>> OpenFileDevice(const std::string& path,
                                                    const FileDeviceOptions& options) {
  bool uring = options.backend == IoBackend::kUring ||
               (options.backend == IoBackend::kAuto && UringUsable().ok());
  if (uring) return OpenUringDevice(path, options.read_only);
  AioOptions aio;
  aio.read_only = options.read_only;
  return OpenAioDevice(path, aio);
}

}  // namespace cachecore
