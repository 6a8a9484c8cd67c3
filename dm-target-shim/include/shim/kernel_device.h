// KernelDevice: a block device the kernel offers for the cached volume
// (/dev/nbdN through kernel NBD, /dev/ublkbN through ublk).
#pragma once

#include <string>

#include "cachecore/base/status.h"

namespace shim {

class KernelDevice {
 public:
  virtual ~KernelDevice() = default;
  virtual const std::string& device() const = 0;
  // Lets go of the device; idempotent.
  virtual cachecore::Status Disconnect() = 0;
};

}  // namespace shim
