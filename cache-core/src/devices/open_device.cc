#include "cachecore/devices/open_device.h"

#include "cachecore/devices/file_device.h"
#include "cachecore/devices/nbd_device.h"

namespace cachecore {

Result<std::unique_ptr<BlockDevice>> OpenOriginDevice(const std::string& path_or_uri, bool read_only) {
  if (IsNbdUri(path_or_uri)) return OpenNbdDevice(path_or_uri);
  FileDeviceOptions options;
  options.read_only = read_only;
  return OpenFileDevice(path_or_uri, options);
}

}  // namespace cachecore
