// OpenOriginDevice: an origin by what the user named: an NBD URI (a network
// volume, cachecore/nbd_device.h) or a file or block device (io_uring or libaio,
// cachecore/devices/file_device.h).
#pragma once

#include <memory>
#include <string>

#include "cachecore/devices/block_device.h"

namespace cachecore {

Result<std::unique_ptr<BlockDevice>> OpenOriginDevice(const std::string& path_or_uri, bool read_only = false);

}  // namespace cachecore
