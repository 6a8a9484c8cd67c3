#include "shim/dm_device.h"

#include <libdevmapper.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cinttypes>
#include <cstdio>

#include <cerrno>
#include <cstdlib>
#include <memory>

namespace shim {

using cachecore::Result;
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

std::string EncodeTable(const DmTable& table) {
  std::string out;
  for (const DmTarget& t : table) {
    if (!out.empty()) out += ';';
    out += std::to_string(t.start) + ' ' + std::to_string(t.length) + ' ' + t.type + ' ' + t.params;
  }
  return out;
}

Result<DmTable> DecodeTable(const std::string& text) {
  DmTable table;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(';', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    DmTarget t;
    char type[64] = {};
    int consumed = 0;
    if (std::sscanf(line.c_str(), "%" SCNu64 " %" SCNu64 " %63s %n", &t.start, &t.length, type,
                    &consumed) < 3) {
      return Status::Corruption("malformed table line '" + line + "'");
    }
    t.type = type;
    t.params = line.substr(static_cast<size_t>(consumed));
    table.push_back(t);
    pos = end + 1;
  }
  return table;
}

uint64_t TableSectors(const DmTable& table) {
  uint64_t end = 0;
  for (const DmTarget& t : table) end = std::max(end, t.start + t.length);
  return end;
}

Result<DmTable> GetTable(const std::string& name) {
  NoUdev();
  if (!DeviceExists(name)) return Status::NotFound("no device-mapper device named " + name);
  Task t(dm_task_create(DM_DEVICE_TABLE));
  if (!t || !dm_task_set_name(t.get(), name.c_str()) || !dm_task_run(t.get())) {
    return Status::IoError("cannot read the table of " + name);
  }
  DmTable table;
  void* next = nullptr;
  do {
    uint64_t start = 0, length = 0;
    char* type = nullptr;
    char* params = nullptr;
    next = dm_get_next_target(t.get(), next, &start, &length, &type, &params);
    if (type) table.push_back({start, length, type, params ? params : ""});
  } while (next);
  return table;
}

namespace {
Status AddTargets(dm_task* t, const DmTable& table) {
  for (const DmTarget& target : table) {
    if (!dm_task_add_target(t, target.start, target.length, target.type.c_str(), target.params.c_str())) {
      return Status::IoError("cannot add a " + target.type + " target");
    }
  }
  return Status::Ok();
}

Status Simple(int op, const std::string& name, const DmTable* table, const char* what) {
  Task t(dm_task_create(op));
  if (!t || !dm_task_set_name(t.get(), name.c_str())) return Status::IoError(std::string(what) + " " + name);
  if (table) CACHECORE_RETURN_IF_ERROR(AddTargets(t.get(), *table));
  if (!dm_task_run(t.get())) return Status::IoError(std::string("cannot ") + what + " " + name);
  dm_task_update_nodes();
  return Status::Ok();
}
}  // namespace

Status CreateDevice(const std::string& name, const DmTable& table) {
  NoUdev();
  if (!HaveDeviceMapper()) return Status::NotSupported("the kernel has no device-mapper");
  if (DeviceExists(name)) return Status::Busy("/dev/mapper/" + name + " exists already");
  return Simple(DM_DEVICE_CREATE, name, &table, "create");
}

Status SwapTable(const std::string& name, const DmTable& table,
                 const std::function<Status()>& while_suspended) {
  NoUdev();
  Result<DmTable> old = GetTable(name);
  if (!old.ok()) return old.status();
  CACHECORE_RETURN_IF_ERROR(Simple(DM_DEVICE_SUSPEND, name, nullptr, "suspend"));
  Status s = while_suspended ? while_suspended() : Status::Ok();
  if (s.ok()) s = Simple(DM_DEVICE_RELOAD, name, &table, "load a new table into");
  if (!s.ok()) {
    // Put the old table back (a failed reload leaves none loaded) and go on.
    (void)Simple(DM_DEVICE_RELOAD, name, &old.value(), "reload the old table into");
  }
  Status resumed = Simple(DM_DEVICE_RESUME, name, nullptr, "resume");
  return s.ok() ? resumed : s;
}

std::optional<std::string> DmNameOf(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISBLK(st.st_mode)) return std::nullopt;
  NoUdev();
  if (!dm_is_dm_major(major(st.st_rdev))) return std::nullopt;
  Task t(dm_task_create(DM_DEVICE_INFO));
  if (!t || !dm_task_set_major(t.get(), static_cast<int>(major(st.st_rdev))) ||
      !dm_task_set_minor(t.get(), static_cast<int>(minor(st.st_rdev))) || !dm_task_run(t.get())) {
    return std::nullopt;
  }
  const char* name = dm_task_get_name(t.get());
  if (name == nullptr) return std::nullopt;
  return std::string(name);
}

Result<bool> IsOpen(const std::string& name) {
  NoUdev();
  Task info(dm_task_create(DM_DEVICE_INFO));
  dm_info i{};
  if (!info || !dm_task_set_name(info.get(), name.c_str()) || !dm_task_run(info.get()) ||
      !dm_task_get_info(info.get(), &i) || !i.exists) {
    return Status::NotFound("no device-mapper device named " + name);
  }
  return i.open_count > 0;
}

Result<bool> DependsOn(const std::string& name, const std::string& path) {
  NoUdev();
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISBLK(st.st_mode)) return false;
  Task t(dm_task_create(DM_DEVICE_DEPS));
  if (!t || !dm_task_set_name(t.get(), name.c_str()) || !dm_task_run(t.get())) {
    return Status::IoError("cannot read what " + name + " maps onto");
  }
  dm_deps* deps = dm_task_get_deps(t.get());
  for (uint32_t i = 0; deps != nullptr && i < deps->count; ++i) {
    // The kernel's encoding of a device number (huge_encode_dev).
    uint64_t dev = deps->device[i];
    uint64_t dep_major = (dev & 0xfff00) >> 8;
    uint64_t dep_minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    if (dep_major == major(st.st_rdev) && dep_minor == minor(st.st_rdev)) return true;
  }
  return false;
}

Status RemoveDevice(const std::string& name) {
  NoUdev();
  if (!DeviceExists(name)) return Status::Ok();
  Result<bool> open = IsOpen(name);
  if (open.ok() && open.value()) {
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
