// Device-mapper devices through libdevmapper (no dmsetup): the cached
// volume appears as /dev/mapper/NAME, a linear table over the kernel
// device that serves it.
#pragma once

#include <cstdint>
#include <string>

#include "cachecore/status.h"

namespace shim {

// Creates /dev/mapper/NAME mapping all `sectors` (512 bytes) of `target`.
// kBusy when NAME exists; kNotSupported when the kernel has no
// device-mapper.
cachecore::Status CreateLinearDevice(const std::string& name, const std::string& target,
                                     uint64_t sectors);
// Removes /dev/mapper/NAME. kBusy while it is open (mounted, say).
cachecore::Status RemoveDevice(const std::string& name);
// True when a device-mapper device called NAME exists.
bool DeviceExists(const std::string& name);

}  // namespace shim
