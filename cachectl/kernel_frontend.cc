#include "kernel_frontend.h"

#include <cstdio>

#include "cachecore/metadata/superblock.h"
#include "shim/dm_device.h"
#include "shim/kernel_nbd.h"
#include "shim/ublk_device.h"

namespace cachectl {

using namespace cachecore;

namespace {

// The kernel device's logical block size: 512, like the disks and volumes
// it stands in for. A larger one would change the volume's geometry under
// a mounted filesystem (ext4 with 1 KiB blocks cannot live on 4 KiB sectors).
constexpr uint32_t kKernelBlockSize = 512;

std::string UblkIdFile(const Daemon& d) { return d.spec.dirs.StateDir(d.spec.name) + "/ublk-id"; }
std::string NbdDeviceFile(const Daemon& d) { return d.spec.dirs.StateDir(d.spec.name) + "/nbd-device"; }

// The ublk device a dead daemon of this cache left behind, if it said so.
int LeftUblkId(const Daemon& d) {
  FILE* f = std::fopen(UblkIdFile(d).c_str(), "r");
  if (f == nullptr) return -1;
  int id = -1;
  if (std::fscanf(f, "%d", &id) != 1) id = -1;
  std::fclose(f);
  return id;
}

// The kernel device a daemon of this cache left when it died, as its
// state files say: the tables above may still point at it.
struct LeftDevice {
  std::string path;  // empty: none
  std::string how;   // "ublk", "netlink" or "ioctl"
  int index = -1;
};

LeftDevice LeftKernelDevice(const Daemon& d) {
  if (FILE* f = std::fopen(NbdDeviceFile(d).c_str(), "r")) {
    int index = -1;
    char how[16] = {};
    bool read = std::fscanf(f, "%d %15s", &index, how) == 2 && index >= 0;
    std::fclose(f);
    if (read) return {"/dev/nbd" + std::to_string(index), how, index};
  }
  int ublk = LeftUblkId(d);
  if (ublk >= 0) return {"/dev/ublkb" + std::to_string(ublk), "ublk", ublk};
  return {};
}

// What names this cache to the kernel's NBD driver (/sys/block/nbdN/backend):
// the kernel hands a device over only to a daemon that gives the same.
std::string NbdBackendId(const Daemon& d) {
  return "cachectl:" + d.spec.name + ":" + UuidToString(d.engine->identity().uuid);
}

// A kernel device for the engine, and what the next daemon needs to know
// of it if this one dies.
struct Connected {
  std::unique_ptr<shim::KernelDevice> device;
  std::string note;        // "ublk" or "nbd", for stats
  bool recovered = false;  // taken back from a daemon that died: its users never saw it go
  std::string state_file;  // names it for the next daemon
  std::string state;
};

// Hands `left`, the NBD device a dead daemon of this cache left, to this
// one; the reason when it cannot.
Result<std::unique_ptr<shim::KernelNbd>> TakeBackNbd(Daemon& d, const LeftDevice& left) {
  if (left.how == "ioctl") {
    return Status::NotSupported("was connected through the NBD ioctls, which cannot hand a device to a new daemon");
  }
  return shim::KernelNbd::Reconnect(d.nbd.get(), left.index, NbdBackendId(d));
}

Connected NbdConnected(std::unique_ptr<shim::KernelNbd> n, bool recovered, const Daemon& d) {
  Connected c;
  c.note = "nbd";
  c.recovered = recovered;
  c.state_file = NbdDeviceFile(d);
  c.state = std::to_string(n->index()) + (n->by_ioctl() ? " ioctl\n" : " netlink\n");
  c.device = std::move(n);
  return c;
}

// A ublk device: the one a dead daemon left, taken back, else a new one.
Result<Connected> StartUblk(Daemon& d, const LeftDevice& left) {
  const bool left_ublk = left.how == "ublk";
  auto u = shim::UblkDevice::Start(d.backend.get(), d.engine->identity().origin_size, left_ublk ? left.index : -1);
  if (!u.ok()) return u.status();
  Connected c;
  c.note = "ublk";
  c.recovered = u.value()->recovered();
  c.state_file = UblkIdFile(d);
  c.state = std::to_string(u.value()->id()) + "\n";
  if (c.recovered) Log("info", "took back " + u.value()->device() + " from a daemon that died");
  if (left_ublk && !c.recovered) d.not_taken_back = "could not be taken back (ublk would not recover it)";
  c.device = std::move(u.value());
  return c;
}

// A kernel block device for the engine: the one a dead daemon left, taken
// back (ublk, or kernel NBD through netlink); else ublk (auto prefers it),
// else kernel NBD. Why a device left behind was not taken back goes to
// `d.not_taken_back`.
Result<Connected> ConnectKernelDevice(Daemon& d) {
  uint64_t size = d.engine->identity().origin_size;
  const std::string& want = d.spec.frontend;
  Status ublk_status = Status::NotSupported("not asked for");
  LeftDevice left = LeftKernelDevice(d);
  if ((want == "nbd" || want == "auto") && (left.how == "netlink" || left.how == "ioctl")) {
    auto taken = TakeBackNbd(d, left);
    if (taken.ok()) {
      Log("info", "took back " + left.path + " from a daemon that died");
      return NbdConnected(std::move(taken.value()), true, d);
    }
    const Status& why = taken.status();
    d.not_taken_back = left.how == "ioctl" ? why.message() : "could not be taken back (" + why.message() + ")";
    // kNotFound: gone with a reboot, say; nothing can wait on it.
    Log(why.code() == StatusCode::kNotFound ? "info" : "warning", left.path + " " + d.not_taken_back);
  }
  if (want == "ublk" || want == "auto") {
    auto u = StartUblk(d, left);
    if (u.ok() || want == "ublk") return u;
    ublk_status = u.status();
  }
  auto n = shim::KernelNbd::Connect(d.nbd.get(), size, kKernelBlockSize, NbdBackendId(d));
  if (!n.ok()) {
    return Status(want == "auto" ? Status::NotSupported(ublk_status.message() + "; " + n.status().message())
                                 : n.status());
  }
  return NbdConnected(std::move(n.value()), false, d);
}

// Before a table is pointed elsewhere: a device the dead daemon left and
// this one did not take back has failed or held the I/O of the tables
// above it since the crash. Suspending an open one (a filesystem mounted)
// would wait for that I/O, forever where the kernel holds it, and the
// filesystem has seen errors where it failed: leave it as it is and say
// what to do. A table nobody has open is swapped like any other.
Status RefuseOverDeadDevice(Daemon& d, const std::string& dm_name) {
  LeftDevice left = LeftKernelDevice(d);
  if (left.path.empty() || !shim::DeviceExists(dm_name)) return Status::Ok();
  Result<bool> over = shim::DependsOn(dm_name, left.path);
  if (!over.ok() || !over.value()) return over.status();
  Result<bool> open = shim::IsOpen(dm_name);
  if (!open.ok() || !open.value()) return open.status();
  std::string why = d.not_taken_back;
  if (why.empty()) {
    why = "was not taken back (start was asked for --frontend " + d.spec.frontend + "; --frontend " +
          (left.how == "ublk" ? "ublk" : "nbd") + " takes it back)";
  }
  d.refused_over_dead_device = true;
  return Status::Busy(left.path + ", the kernel device of the daemon that died, " + why + "; /dev/mapper/" +
                      dm_name + " is open over it and its I/O has failed or waited since the crash: "
                      "unmount it, then run 'cachectl start " + d.spec.name +
                      "' again (and check its filesystem before mounting it)");
}

// Tells the next daemon which kernel device this one serves, in case it
// dies: before any table points at it.
void RecordKernelDevice(const Daemon& d, const Connected& c) {
  unlink(UblkIdFile(d).c_str());
  unlink(NbdDeviceFile(d).c_str());
  if (FILE* f = std::fopen(c.state_file.c_str(), "w")) {
    std::fputs(c.state.c_str(), f);
    std::fclose(f);
  }
}

// Online attach: the volume in use is reloaded to point at the kernel device.
Status SwapInOnline(Daemon& d) {
  uint64_t size = d.engine->identity().origin_size;
  auto c = ConnectKernelDevice(d);
  if (!c.ok()) return c.status();
  if (!c->recovered) CACHECORE_RETURN_IF_ERROR(RefuseOverDeadDevice(d, d.spec.online_volume));
  RecordKernelDevice(d, c.value());
  if (!c->recovered) {  // a device taken back is the one the volume points at already
    shim::DmTable cached{{0, size / 512, "linear", c->device->device() + " 0"}};
    CACHECORE_RETURN_IF_ERROR(shim::SwapTable(d.spec.online_volume, cached, nullptr));
  }
  d.kernel = std::move(c->device);
  d.online_swapped = true;
  d.frontend_note = c->note;
  Log("info", "online: /dev/mapper/" + d.spec.online_volume + " now goes through " + d.kernel->device());
  return Status::Ok();
}

// /dev/mapper/NAME over the kernel device. One a dead daemon left is kept
// when its device was taken back, and replaced when nothing has it open.
Status PutDmDeviceOver(Daemon& d, const Connected& c) {
  if (shim::DeviceExists(d.spec.name)) {
    if (c.recovered) return Status::Ok();
    CACHECORE_RETURN_IF_ERROR(RefuseOverDeadDevice(d, d.spec.name));
    Result<bool> over = shim::DependsOn(d.spec.name, LeftKernelDevice(d).path);
    if (over.ok() && over.value()) CACHECORE_RETURN_IF_ERROR(shim::RemoveDevice(d.spec.name));
  }
  RecordKernelDevice(d, c);
  return shim::CreateLinearDevice(d.spec.name, c.device->device(), d.engine->identity().origin_size / 512);
}

}  // namespace

void PublishFrontEnd(Daemon& d) {
  std::string kernel = d.kernel ? d.kernel->device() : "";
  std::string dm = d.dm_created       ? "/dev/mapper/" + d.spec.name
                   : d.online_swapped ? "/dev/mapper/" + d.spec.online_volume
                                      : "";
  std::lock_guard lock(d.shown_mu);
  d.shown_kernel_device = std::move(kernel);
  d.shown_dm_device = std::move(dm);
  d.shown_frontend = d.frontend_note;
}

namespace {

// The kernel front end: a kernel device, /dev/mapper/NAME over it.
Status StartFrontEnd(Daemon& d) {
  const std::string& want = d.spec.frontend;
  if (!d.spec.online_volume.empty()) return SwapInOnline(d);
  if (want == "socket") {
    d.frontend_note = "socket";
    return Status::Ok();
  }
  auto c = ConnectKernelDevice(d);
  Status s = c.status();
  if (s.ok()) {
    s = PutDmDeviceOver(d, c.value());
    if (s.ok()) {
      d.kernel = std::move(c->device);
      d.dm_created = true;
      d.frontend_note = c->note;
      Log("info", "kernel front end: " + d.kernel->device() + " as /dev/mapper/" + d.spec.name);
      return Status::Ok();
    }
  }
  if (want != "auto" || d.refused_over_dead_device) return s;
  d.frontend_note = "socket";  // auto: the socket alone, and say why
  Log("info", "front end: the NBD socket alone (" + s.message() + ")");
  return Status::Ok();
}

}  // namespace

Status StartKernelFrontEnd(Daemon& d) {
  Status s = StartFrontEnd(d);
  PublishFrontEnd(d);
  return s;
}

// Undoes StartKernelFrontEnd; kBusy (and nothing changed) while the
// device is in use.
Status StopKernelFrontEnd(Daemon& d) {
  if (d.online_swapped) {
    // With the volume suspended nothing new arrives: flush, then give it
    // back its own table. On any failure it keeps the cached one.
    Result<shim::DmTable> original = shim::DecodeTable(d.spec.online_table);
    if (!original.ok()) return original.status();
    CACHECORE_RETURN_IF_ERROR(shim::SwapTable(d.spec.online_volume, original.value(),
                                              [&] { return d.engine->Flush(); }));
    d.online_swapped = false;
    PublishFrontEnd(d);
    Log("info", "online: /dev/mapper/" + d.spec.online_volume + " has its own table again");
  }
  if (d.dm_created) {
    CACHECORE_RETURN_IF_ERROR(shim::RemoveDevice(d.spec.name));
    d.dm_created = false;
    PublishFrontEnd(d);
  }
  if (d.kernel) {
    CACHECORE_RETURN_IF_ERROR(d.kernel->Disconnect());
    std::unique_ptr<shim::KernelDevice> gone = std::move(d.kernel);
    PublishFrontEnd(d);  // before the device goes: stats reads the copy
    gone.reset();
    unlink(UblkIdFile(d).c_str());
    unlink(NbdDeviceFile(d).c_str());
  }
  return Status::Ok();
}

}  // namespace cachectl
