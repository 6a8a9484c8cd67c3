// Device-mapper devices through libdevmapper (no dmsetup): the cached
// volume appears as /dev/mapper/NAME, a linear table over the kernel
// device that serves it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cachecore/base/status.h"

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
// True when NAME is open (mounted, or held by a program or another table).
cachecore::Result<bool> IsOpen(const std::string& name);
// True when NAME's live table maps onto the block device at `path`.
cachecore::Result<bool> DependsOn(const std::string& name, const std::string& path);

// One line of a device-mapper table.
struct DmTarget {
  uint64_t start = 0;
  uint64_t length = 0;  // sectors
  std::string type;
  std::string params;
};
using DmTable = std::vector<DmTarget>;

// "start length type params" lines joined by ';' (for saving), and back.
std::string EncodeTable(const DmTable& table);
cachecore::Result<DmTable> DecodeTable(const std::string& text);
uint64_t TableSectors(const DmTable& table);

// The live table of NAME; kNotFound when there is no such device.
cachecore::Result<DmTable> GetTable(const std::string& name);
// Creates NAME with `table`.
cachecore::Status CreateDevice(const std::string& name, const DmTable& table);
// Suspends NAME (its in-flight I/O completes), runs `while_suspended`,
// loads `table` and resumes. If anything fails, NAME is resumed with the
// table it had: the volume never goes missing.
cachecore::Status SwapTable(const std::string& name, const DmTable& table,
                            const std::function<cachecore::Status()>& while_suspended);
// The device-mapper name of a block device path, or nothing when the path
// is not a device-mapper device.
std::optional<std::string> DmNameOf(const std::string& path);

}  // namespace shim
