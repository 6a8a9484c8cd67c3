// NbdDevice: a BlockDevice over an NBD export, through libnbd: an origin
// that is a network volume (nbd://host:port/export, nbds://...,
// nbd+unix:///export?socket=PATH). Requests of one SubmitAndWait go out
// together on one connection; with a server that allows several
// connections (multi-conn) concurrent callers use several.
#pragma once

#include <memory>
#include <string>

#include "cachecore/devices/block_device.h"

namespace cachecore {

struct NbdDeviceOptions {
  unsigned connections = 4;  // at most; one unless the server allows multi-conn
};

// Whether `path` is an NBD URI rather than a file or device path.
bool IsNbdUri(const std::string& path);

// Connects. kNotFound when nothing answers at the URI, kInvalidArgument for
// a malformed URI or an export whose size is not a multiple of 512.
Result<std::unique_ptr<BlockDevice>> OpenNbdDevice(const std::string& uri,
                                                   const NbdDeviceOptions& options = {});

}  // namespace cachecore
