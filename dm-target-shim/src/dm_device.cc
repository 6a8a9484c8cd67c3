#include "shim/dm_device.h"

#include <libdevmapper.h>

#include <cerrno>
#include <cstdlib>
#include <memory>

namespace shim {

using cachecore::Status;

namespace {

struct TaskDeleter {
  void operator()(dm_task* t) const { dm_task_destroy(t); }
};
using Task = std::unique_ptr<dm_task, TaskDeleter>;

bool HaveDeviceMapper() {
  if (dm_driver_version(nullptr, 0)) return true;
  if (std::system("modprobe dm-mod >/dev/null 2>&1") != 0) return false;
  char version[64];
  return dm_driver_version(version, sizeof(version)) != 0;
}

// Without udev (containers, the test guest) libdevmapper makes the nodes.
void NoUdev() {
  static bool once = [] {
    dm_udev_set_sync_support(0);
    dm_log_with_errno_init(nullptr);
    return true;
  }();
  (void)once;
}

}  // namespace

bool DeviceExists(const std::string& name) {
  NoUdev();
  Task t(dm_task_create(DM_DEVICE_INFO));
  if (!t || !dm_task_set_name(t.get(), name.c_str()) || !dm_task_run(t.get())) return false;
  dm_info info{};
  return dm_task_get_info(t.get(), &info) && info.exists;
}

Status CreateLinearDevice(const std::string& name, const std::string& target, uint64_t sectors) {
  NoUdev();
  if (!HaveDeviceMapper()) return Status::NotSupported("the kernel has no device-mapper");
  if (DeviceExists(name)) return Status::Busy("/dev/mapper/" + name + " exists already");
  Task t(dm_task_create(DM_DEVICE_CREATE));
  std::string params = target + " 0";
  if (!t || !dm_task_set_name(t.get(), name.c_str()) ||
      !dm_task_add_target(t.get(), 0, sectors, "linear", params.c_str()) || !dm_task_run(t.get())) {
    return Status::IoError("cannot create /dev/mapper/" + name + " over " + target);
  }
  dm_task_update_nodes();
  return Status::Ok();
}

Status RemoveDevice(const std::string& name) {
  NoUdev();
  if (!DeviceExists(name)) return Status::Ok();
  Task info(dm_task_create(DM_DEVICE_INFO));
  dm_info i{};
  if (info && dm_task_set_name(info.get(), name.c_str()) && dm_task_run(info.get()) &&
      dm_task_get_info(info.get(), &i) && i.open_count > 0) {
    return Status::Busy("/dev/mapper/" + name + " is in use (mounted or open); unmount it first");
  }
  Task t(dm_task_create(DM_DEVICE_REMOVE));
  if (!t || !dm_task_set_name(t.get(), name.c_str()) || !dm_task_run(t.get())) {
    return Status::IoError("cannot remove /dev/mapper/" + name);
  }
  dm_task_update_nodes();
  return Status::Ok();
}

}  // namespace shim
