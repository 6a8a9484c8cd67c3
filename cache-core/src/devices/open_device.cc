#include "cachecore/devices/open_device.h"

#include "cachecore/devices/aio_device.h"
#include "cachecore/devices/nbd_device.h"

namespace cachecore {

Result<std::unique_ptr<BlockDevice>> OpenOriginDevice(const std::string& path_or_uri, bool read_only) {
  if (IsNbdUri(path_or_uri)) return OpenNbdDevice(path_or_uri);
  AioOptions options;
  options.read_only = read_only;
  return OpenAioDevice(path_or_uri, options);
}

}  // namespace cachecore
