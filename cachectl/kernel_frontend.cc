#include "kernel_frontend.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "daemon_state.h"  // Log
#include "shim/dm_device.h"
#include "shim/kernel_nbd.h"
#include "shim/ublk_device.h"

namespace cachectl {

using cachecore::Result;
using cachecore::Status;
using cachecore::StatusCode;

namespace {

// The kernel device's logical block size: 512, like the disks and volumes
// it stands in for. A larger one would change the volume's geometry under
// a mounted filesystem (ext4 with 1 KiB blocks cannot live on 4 KiB sectors).
constexpr uint32_t kKernelBlockSize = 512;

std::string UblkIdFile(const KernelFrontEnd& f) { return f.state_prefix + "ublk-id"; }
std::string NbdDeviceFile(const KernelFrontEnd& f) { return f.state_prefix + "nbd-device"; }
// Present while an online volume has its own table and the engine may
// hold older copies of its blocks.
std::string ReleasedFile(const std::string& prefix) { return prefix + "online-released"; }

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// An empty file at `path`, there after a power cut: it and its directory synced.
Status WriteDurably(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  const bool written = fd >= 0 && fsync(fd) == 0;
  if (fd >= 0) close(fd);
  const std::string dir = path.substr(0, path.rfind('/') + 1);
  const int dir_fd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool synced = dir_fd >= 0 && fsync(dir_fd) == 0;
  if (dir_fd >= 0) close(dir_fd);
  return written && synced ? Status::Ok() : Status::IoError("cannot write " + path);
}

void ForgetKernelDevice(const KernelFrontEnd& f) {
  unlink(UblkIdFile(f).c_str());
  unlink(NbdDeviceFile(f).c_str());
}

// The ublk device a dead daemon of this cache left behind, if it said so.
int LeftUblkId(const KernelFrontEnd& f) {
  FILE* file = std::fopen(UblkIdFile(f).c_str(), "r");
  if (file == nullptr) return -1;
  int id = -1;
  if (std::fscanf(file, "%d", &id) != 1) id = -1;
  std::fclose(file);
  return id;
}

// The kernel device a daemon of this cache left when it died, as its
// state files say: the tables above may still point at it.
struct LeftDevice {
  std::string path;  // empty: none
  std::string how;   // "ublk", "netlink" or "ioctl"
  int index = -1;
};

LeftDevice LeftKernelDevice(const KernelFrontEnd& f) {
  if (FILE* file = std::fopen(NbdDeviceFile(f).c_str(), "r")) {
    int index = -1;
    char how[16] = {};
    bool read = std::fscanf(file, "%d %15s", &index, how) == 2 && index >= 0;
    std::fclose(file);
    if (read) return {"/dev/nbd" + std::to_string(index), how, index};
  }
  int ublk = LeftUblkId(f);
  if (ublk >= 0) return {"/dev/ublkb" + std::to_string(ublk), "ublk", ublk};
  return {};
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
Result<std::unique_ptr<shim::KernelNbd>> TakeBackNbd(KernelFrontEnd& f, const LeftDevice& left) {
  if (left.how == "ioctl") {
    return Status::NotSupported("was connected through the NBD ioctls, which cannot hand a device to a new daemon");
  }
  return shim::KernelNbd::Reconnect(f.nbd, left.index, f.backend_id, f.export_name);
}

Connected NbdConnected(std::unique_ptr<shim::KernelNbd> n, bool recovered, const KernelFrontEnd& f) {
  Connected c;
  c.note = "nbd";
  c.recovered = recovered;
  c.state_file = NbdDeviceFile(f);
  c.state = std::to_string(n->index()) + (n->by_ioctl() ? " ioctl\n" : " netlink\n");
  c.device = std::move(n);
  return c;
}

// A ublk device: the one a dead daemon left, taken back, else a new one.
Result<Connected> StartUblk(KernelFrontEnd& f, const LeftDevice& left) {
  const bool left_ublk = left.how == "ublk";
  auto u = shim::UblkDevice::Start(f.backend, f.size, left_ublk ? left.index : -1);
  if (!u.ok()) return u.status();
  Connected c;
  c.note = "ublk";
  c.recovered = u.value()->recovered();
  c.state_file = UblkIdFile(f);
  c.state = std::to_string(u.value()->id()) + "\n";
  if (c.recovered) Log("info", "took back " + u.value()->device() + " from a daemon that died");
  if (left_ublk && !c.recovered) f.not_taken_back = "could not be taken back (ublk would not recover it)";
  c.device = std::move(u.value());
  return c;
}

// A kernel block device for the engine: the one a dead daemon left, taken
// back (ublk, or kernel NBD through netlink); else ublk (auto prefers it),
// else kernel NBD. Why a device left behind was not taken back goes to
// `f.not_taken_back`.
Result<Connected> ConnectKernelDevice(KernelFrontEnd& f) {
  const std::string& want = f.frontend;
  Status ublk_status = Status::NotSupported("not asked for");
  LeftDevice left = LeftKernelDevice(f);
  if ((want == "nbd" || want == "auto") && (left.how == "netlink" || left.how == "ioctl")) {
    auto taken = TakeBackNbd(f, left);
    if (taken.ok()) {
      Log("info", "took back " + left.path + " from a daemon that died");
      return NbdConnected(std::move(taken.value()), true, f);
    }
    const Status& why = taken.status();
    f.not_taken_back = left.how == "ioctl" ? why.message() : "could not be taken back (" + why.message() + ")";
    // kNotFound: gone with a reboot, say; nothing can wait on it.
    Log(why.code() == StatusCode::kNotFound ? "info" : "warning", left.path + " " + f.not_taken_back);
  }
  if (want == "ublk" || want == "auto") {
    auto u = StartUblk(f, left);
    if (u.ok() || want == "ublk") return u;
    ublk_status = u.status();
  }
  auto n = shim::KernelNbd::Connect(f.nbd, f.size, kKernelBlockSize, f.backend_id, f.export_name);
  if (!n.ok()) {
    return Status(want == "auto" ? Status::NotSupported(ublk_status.message() + "; " + n.status().message())
                                 : n.status());
  }
  return NbdConnected(std::move(n.value()), false, f);
}

// Before a table is pointed elsewhere: a device the dead daemon left and
// this one did not take back has failed or held the I/O of the tables
// above it since the crash. Suspending an open one (a filesystem mounted)
// would wait for that I/O, forever where the kernel holds it, and the
// filesystem has seen errors where it failed: leave it as it is and say
// what to do. A table nobody has open is swapped like any other.
Status RefuseOverDeadDevice(KernelFrontEnd& f, const std::string& dm_name) {
  LeftDevice left = LeftKernelDevice(f);
  if (left.path.empty() || !shim::DeviceExists(dm_name)) return Status::Ok();
  Result<bool> over = shim::DependsOn(dm_name, left.path);
  if (!over.ok() || !over.value()) return over.status();
  Result<bool> open = shim::IsOpen(dm_name);
  if (!open.ok() || !open.value()) return open.status();
  std::string why = f.not_taken_back;
  if (why.empty()) {
    why = "was not taken back (start was asked for --frontend " + f.frontend + "; --frontend " +
          (left.how == "ublk" ? "ublk" : "nbd") + " takes it back)";
  }
  f.refused_over_dead_device = true;
  return Status::Busy(left.path + ", the kernel device of the daemon that died, " + why + "; /dev/mapper/" +
                      dm_name + " is open over it and its I/O has failed or waited since the crash: "
                      "unmount it, then run 'cachectl start " + f.cache_name +
                      "' again (and check its filesystem before mounting it)");
}

// Tells the next daemon which kernel device this one serves, in case it
// dies: before any table points at it.
void RecordKernelDevice(const KernelFrontEnd& f, const Connected& c) {
  ForgetKernelDevice(f);
  if (FILE* file = std::fopen(c.state_file.c_str(), "w")) {
    std::fputs(c.state.c_str(), file);
    std::fclose(file);
  }
}

// Online: the volume in use is reloaded to point at the kernel device, also
// one taken back (a volume a crash left suspended resumes; one that had
// its own table again goes back through the cache). Emptied from the cache
// in the suspended window if it had its own table while the engine kept
// its lines.
Status SwapInOnline(KernelFrontEnd& f) {
  auto c = ConnectKernelDevice(f);
  if (!c.ok()) return c.status();
  if (!c->recovered) CACHECORE_RETURN_IF_ERROR(RefuseOverDeadDevice(f, f.online_volume));
  bool released = Exists(ReleasedFile(f.state_prefix));
  // Emptied while suspended: nothing writes around the cache from then
  // on, so nothing the cache holds of it (a mover's fill, an NBD client's
  // read) can go stale before its I/O goes through the cache.
  auto evict = [&]() -> Status {
    Log("info", "online: /dev/mapper/" + f.online_volume + " had its own table; emptying it from the cache");
    return f.evict();
  };
  RecordKernelDevice(f, c.value());
  shim::DmTable cached{{0, f.size / 512, "linear", c->device->device() + " 0"}};
  if (Status s = shim::SwapTable(f.online_volume, cached, released ? evict : std::function<Status()>());
      !s.ok()) {
    // A device taken back is kept whatever: the volume resumed on the
    // table it had, which may point at it.
    if (!c->recovered) {
      ForgetKernelDevice(f);  // the new device goes with `c`
      return s;
    }
    Log("warning", "online: /dev/mapper/" + f.online_volume + " could not be reloaded: " + s.message());
    released = false;  // not through the cache yet: the next start empties it again
  }
  if (released) ForgetRelease(f);
  f.kernel = std::move(c->device);
  f.online_swapped = true;
  f.note = c->note;
  Log("info", "online: /dev/mapper/" + f.online_volume + " now goes through " + f.kernel->device());
  return Status::Ok();
}

// /dev/mapper/NAME over the kernel device. One a dead daemon left is kept
// when its device was taken back, and replaced when nothing has it open.
Status PutDmDeviceOver(KernelFrontEnd& f, const Connected& c) {
  if (shim::DeviceExists(f.dm_name)) {
    if (c.recovered) return Status::Ok();
    CACHECORE_RETURN_IF_ERROR(RefuseOverDeadDevice(f, f.dm_name));
    Result<bool> over = shim::DependsOn(f.dm_name, LeftKernelDevice(f).path);
    if (over.ok() && over.value()) CACHECORE_RETURN_IF_ERROR(shim::RemoveDevice(f.dm_name));
  }
  RecordKernelDevice(f, c);
  Status s = shim::CreateLinearDevice(f.dm_name, c.device->device(), f.size / 512);
  if (!s.ok() && !c.recovered) ForgetKernelDevice(f);  // the new device goes with `c`
  return s;
}

}  // namespace

std::string KernelFrontEnd::dm_device() const {
  return dm_created ? "/dev/mapper/" + dm_name : online_swapped ? "/dev/mapper/" + online_volume : "";
}

void ForgetRelease(const KernelFrontEnd& f) { unlink(ReleasedFile(f.state_prefix).c_str()); }

void ForgetVolumeState(const std::string& state_prefix) {
  for (const char* file : {"ublk-id", "nbd-device", "online-released"}) unlink((state_prefix + file).c_str());
}

// The kernel front end: a kernel device, /dev/mapper/NAME over it.
Status StartKernelFrontEnd(KernelFrontEnd& f) {
  const std::string& want = f.frontend;
  if (!f.online_volume.empty()) return SwapInOnline(f);
  if (want == "socket") {
    f.note = "socket";
    return Status::Ok();
  }
  auto c = ConnectKernelDevice(f);
  Status s = c.status();
  if (s.ok()) {
    s = PutDmDeviceOver(f, c.value());
    if (s.ok()) {
      f.kernel = std::move(c->device);
      f.dm_created = true;
      f.note = c->note;
      Log("info", "kernel front end: " + f.kernel->device() + " as /dev/mapper/" + f.dm_name);
      return Status::Ok();
    }
  }
  if (want != "auto" || f.refused_over_dead_device) return s;
  f.note = "socket";  // auto: the socket alone, and say why
  Log("info", "front end of " + f.export_name + ": the NBD socket alone (" + s.message() + ")");
  return Status::Ok();
}

Status RefuseWhileOpen(const KernelFrontEnd& f) {
  if (!f.dm_created) return Status::Ok();
  Result<bool> open = shim::IsOpen(f.dm_name);
  if (!open.ok()) return open.status();
  if (open.value()) return Status::Busy("/dev/mapper/" + f.dm_name + " is in use (mounted?): unmount it first");
  return Status::Ok();
}

Status StopKernelFrontEnd(KernelFrontEnd& f, const std::function<Status()>& clean) {
  if (f.online_swapped) {
    // With the volume suspended nothing new arrives: clean it, say so,
    // then give it back its own table. On any failure it keeps the cached
    // one (and a start that finds the file empties it: harmless).
    Result<shim::DmTable> original = shim::DecodeTable(f.online_table);
    if (!original.ok()) return original.status();
    const std::string released = ReleasedFile(f.state_prefix);
    auto clean_and_say = [&]() -> Status {
      CACHECORE_RETURN_IF_ERROR(clean());
      return WriteDurably(released);
    };
    CACHECORE_RETURN_IF_ERROR(shim::SwapTable(f.online_volume, original.value(), clean_and_say));
    f.online_swapped = false;
    Log("info", "online: /dev/mapper/" + f.online_volume + " has its own table again");
  }
  if (f.dm_created) {
    CACHECORE_RETURN_IF_ERROR(shim::RemoveDevice(f.dm_name));
    f.dm_created = false;
  }
  if (f.kernel) {
    CACHECORE_RETURN_IF_ERROR(f.kernel->Disconnect());
    f.kernel.reset();
    ForgetKernelDevice(f);
  }
  return Status::Ok();
}

}  // namespace cachectl
