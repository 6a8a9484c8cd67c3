#include "daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "cachecore/aio_device.h"
#include "cachecore/open_device.h"
#include "cachecore/steps.h"
#include "cachecore/superblock.h"
#include "cachecore/wipe.h"
#include "cli_common.h"
#include "control.h"
#include "placement_control.h"
#include "shim/dm_device.h"
#include "shim/engine_backend.h"
#include "shim/kernel_nbd.h"
#include "shim/ublk_device.h"
#include "shim/socket_io.h"

namespace cachectl {

using namespace cachecore;

namespace {

void Log(const char* level, const std::string& msg) {
  char when[32];
  std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", std::gmtime(&now));
  std::fprintf(stderr, "%s %s %s\n", when, level, msg.c_str());
  std::fflush(stderr);
}

// The test hooks at the steps of cachecore/steps.h. CACHECTL_CRASH_AT=STEP:
// the daemon dies by SIGKILL the moment it gets there, as on a crash (no
// cleanup, nothing flushed on the way out). CACHECTL_PAUSE_AT=STEP:SECONDS:
// the first time it gets there it waits that long, so a test can act while
// a flush or mode switch is in the middle.
void AtNamedStep(const char* step) {
  static const char* crash = std::getenv("CACHECTL_CRASH_AT");
  static const char* pause = std::getenv("CACHECTL_PAUSE_AT");
  static std::atomic<bool> paused{false};
  if (crash && std::strcmp(step, crash) == 0) {
    Log("error", std::string("CACHECTL_CRASH_AT: killed at step ") + step);
    kill(getpid(), SIGKILL);
  }
  const char* colon = pause ? std::strchr(pause, ':') : nullptr;
  if (colon && std::string(pause, colon) == step && !paused.exchange(true)) {
    Log("info", std::string("CACHECTL_PAUSE_AT: pausing at step ") + step);
    std::this_thread::sleep_for(std::chrono::seconds(std::atoi(colon + 1)));
  }
}

// The running daemon's parts, and how it is asked to stop.
struct Daemon {
  DaemonSpec spec;
  std::unique_ptr<BlockDevice> origin, cache;
  std::unique_ptr<MetadataStore> store;
  std::shared_mutex engine_mu;  // guards `engine` going away at shutdown
  std::unique_ptr<Engine> engine;
  std::unique_ptr<shim::EngineBackend> backend;
  std::unique_ptr<shim::NbdServer> nbd;
  std::unique_ptr<shim::KernelDevice> kernel;  // /dev/ublkbN or /dev/nbdN, when one runs
  bool dm_created = false;                  // /dev/mapper/NAME over it
  bool online_swapped = false;              // the online volume points at /dev/nbdN
  std::string frontend_note;                // what the daemon chose, for stats
  std::vector<std::string> notices;         // for the user of 'start' (a repair made on the way)
  std::string not_taken_back;               // why a kernel device a dead daemon left was not taken back
  bool refused_over_dead_device = false;    // so 'auto' does not fall back to the socket alone
  int control_fd = -1;

  std::mutex mu;
  std::condition_variable cv;
  bool stop_requested = false;
  bool detach = false;
  bool wipe = false;  // detach --wipe: no copy of the volume's data stays on the cache device
  bool stopped = false;
  Status stop_status;
};

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

// The kernel front end: a kernel device, /dev/mapper/NAME over it.
Status StartKernelFrontEnd(Daemon& d) {
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
    Log("info", "online: /dev/mapper/" + d.spec.online_volume + " has its own table again");
  }
  if (d.dm_created) {
    CACHECORE_RETURN_IF_ERROR(shim::RemoveDevice(d.spec.name));
    d.dm_created = false;
  }
  if (d.kernel) {
    CACHECORE_RETURN_IF_ERROR(d.kernel->Disconnect());
    d.kernel.reset();
    unlink(UblkIdFile(d).c_str());
    unlink(NbdDeviceFile(d).c_str());
  }
  return Status::Ok();
}

// A superblock that only fails its checksum is rewritten from the store
// when everything else proves the devices are this store's cache
// (cachecore/superblock.h); the engine then opens it as after a crash.
Status RepairDamagedSuperblock(Daemon& d) {
  Result<std::optional<SuperblockRepair>> repair =
      RepairSuperblock(d.cache.get(), d.origin.get(), d.store.get(), d.spec.engine.line_size);
  if (!repair.ok()) return repair.status();
  if (repair->has_value()) {
    Log("warning", repair->value().message + "; opening as after a crash");
    d.notices.push_back(repair->value().message);
  }
  return Status::Ok();
}

Status Open(Daemon& d) {
  if (!d.spec.online_volume.empty() && !shim::DeviceExists(HiddenOriginName(d.spec.name))) {
    Result<shim::DmTable> table = shim::DecodeTable(d.spec.online_table);
    if (!table.ok()) return table.status();
    CACHECORE_RETURN_IF_ERROR(shim::CreateDevice(HiddenOriginName(d.spec.name), table.value()));
  }
  auto origin = OpenOriginDevice(d.spec.origin);
  if (!origin.ok()) return origin.status();
  auto cache = OpenAioDevice(d.spec.cache);
  if (!cache.ok()) return cache.status();
  d.origin = std::move(origin.value());
  d.cache = std::move(cache.value());
  MetadataOptions mo;
  mo.create_if_missing = d.spec.create;
  auto store = MetadataStore::Open(d.spec.dirs.Metadata(d.spec.name), mo);
  if (!store.ok()) return store.status();
  d.store = std::move(store.value());
  if (!d.spec.create) CACHECORE_RETURN_IF_ERROR(RepairDamagedSuperblock(d));
  EngineDevices devices{d.origin.get(), d.cache.get(), d.store.get()};
  auto engine = d.spec.create ? Engine::Create(devices, d.spec.engine, d.spec.replace)
                              : Engine::Open(devices, d.spec.engine);
  if (!engine.ok()) return engine.status();
  d.engine = std::move(engine.value());
  d.backend = std::make_unique<shim::EngineBackend>(d.engine.get());
  shim::NbdServerOptions o;
  o.export_name = d.spec.name;
  o.unix_path = d.spec.dirs.NbdSocket(d.spec.name);
  o.tcp_address = d.spec.tcp_address;
  if (d.spec.socket_group >= 0) {
    o.socket_mode = 0660;
    o.socket_group = d.spec.socket_group;
  }
  auto nbd = shim::NbdServer::Start(d.backend.get(), o);
  if (!nbd.ok()) return nbd.status();
  d.nbd = std::move(nbd.value());
  return StartKernelFrontEnd(d);
}

// Clears sockets a dead daemon left; refuses when a live one answers. With
// a socket group the group may enter the cache's run directory (and pass
// through the one above it, without listing it).
Status ClaimRunDir(const Dirs& dirs, const std::string& name, int gid) {
  const std::string dir = dirs.RunDir(name);
  CACHECORE_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  if (gid >= 0) {
    std::string parent = dir.substr(0, dir.rfind('/'));
    if (chmod(parent.c_str(), 0711) != 0 || chown(dir.c_str(), static_cast<uid_t>(-1), gid) != 0 ||
        chmod(dir.c_str(), 0750) != 0) {
      return Status::IoError("cannot open " + dir + " to group " + std::to_string(gid) + ": " +
                             std::strerror(errno));
    }
  } else {
    chmod(dir.c_str(), 0700);  // a group given at an earlier start is taken back
  }
  Result<int> fd = shim::ConnectUnix(dirs.ControlSocket(name));
  if (fd.ok()) {
    close(fd.value());
    return Status::Busy("cache " + name + " is already running");
  }
  unlink(dirs.ControlSocket(name).c_str());
  unlink(dirs.NbdSocket(name).c_str());
  return Status::Ok();
}

// What the daemon did on its way up that its starter should show, as
// "data notice=TEXT" lines before the final answer.
void ReportNotices(int fd, const Daemon& d) {
  for (const std::string& notice : d.notices) {
    std::string line = "data notice=" + notice + "\n";
    (void)shim::WriteFull(fd, line.data(), line.size());
  }
}

void Report(int fd, const Status& s) {
  std::string line = s.ok() ? "ok\n"
                            : "error " + std::to_string(ExitCodeOf(s)) + " " + s.message() + "\n";
  (void)shim::WriteFull(fd, line.data(), line.size());
}

// After a detach: the cache device keeps no copy of the volume's data.
Status WipeCacheDevice(Daemon& d) {
  Log("info", "wiping " + d.spec.cache);
  Result<WipeReport> r = WipeDevice(d.cache.get());
  if (!r.ok()) return r.status();
  Log("info", std::string("wiped ") + d.spec.cache + (r->discarded ? ": discarded" : ": no discard") +
                  ", " + std::to_string(r->bytes_overwritten) + " bytes overwritten with zeros");
  return Status::Ok();
}

void RequestStop(Daemon& d, bool detach, bool wipe = false) {
  std::lock_guard lock(d.mu);
  d.stop_requested = true;
  d.detach = d.detach || detach;
  d.wipe = d.wipe || wipe;
  d.cv.notify_all();
}

Status WaitStopped(Daemon& d) {
  std::unique_lock lock(d.mu);
  d.cv.wait(lock, [&] { return d.stopped; });
  return d.stop_status;
}

void SendLine(int fd, const std::string& line) {
  std::string l = line + "\n";
  (void)shim::WriteFull(fd, l.data(), l.size());
}

// A "data KEY=VALUE" line for each value given to it.
DataSink DataTo(int fd) {
  return [fd](const std::string& k, const std::string& v) { SendLine(fd, "data " + k + "=" + v); };
}

void SendStats(int fd, Daemon& d) {
  StatsSnapshot s = d.engine->stats();
  DataSink kv = DataTo(fd);
  auto num = [&](const std::string& k, uint64_t v) { kv(k, std::to_string(v)); };
  auto ratio = [&](const std::string& k, double v) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.4f", v);
    kv(k, b);
  };
  // metadata_failed first: it refuses writes, where failed passes them through.
  kv("state", s.metadata_failed ? "metadata_failed" : s.failed ? "failed" : "running");
  kv("mode", CacheModeName(d.engine->mode()));
  kv("metadata_failed", s.metadata_failed ? "true" : "false");
  kv("frontend", d.frontend_note);
  kv("kernel_device", d.kernel ? d.kernel->device() : "");
  kv("dm_device", d.dm_created       ? "/dev/mapper/" + d.spec.name
                  : d.online_swapped ? "/dev/mapper/" + d.spec.online_volume
                                     : "");
  num("line_size", d.engine->line_size());
  EngineConfig now = d.engine->settings();
  num("seq_cutoff", now.sequential_cutoff);
  num("dirty_high_pct", now.dirty_high_pct);
  num("dirty_low_pct", now.dirty_low_pct);
  num("cleaner_batch_lines", now.cleaner_batch_lines);
  num("capacity_lines", s.capacity_lines);
  num("overprovisioned_bytes", d.engine->overprovisioned_bytes());
  PlacementStats(*d.engine, kv);
  num("occupancy_lines", s.occupancy_lines);
  num("dirty_lines", s.dirty_lines);
  num("clean_lines", s.clean_lines);
  num("read_hits", s.read_hits);
  num("read_misses", s.read_misses);
  num("write_hits", s.write_hits);
  num("write_misses", s.write_misses);
  ratio("read_hit_ratio", s.read_hit_ratio());
  ratio("hit_ratio", s.hit_ratio());
  num("promotions", s.promotions);
  num("bypassed", s.bypassed);
  num("evictions", s.evictions);
  num("cleaner_writes", s.cleaner_writes);
  // requests.KIND: FUA writes and flushes as the front ends received them.
  num("requests.fua_writes", d.backend->fua_writes());
  num("requests.flushes", d.backend->flushes());
  const ErrorCounts& e = s.errors;
  // errors.DEVICE.KIND: the CLI nests them into objects.
  num("errors.cache.read", e.cache_read);
  num("errors.cache.write", e.cache_write);
  num("errors.cache.flush", e.cache_flush);
  num("errors.cache.checksum_repaired", e.checksum_repaired);
  num("errors.cache.checksum_failed", e.checksum_failed);
  num("errors.origin.read", e.origin_read);
  num("errors.origin.write", e.origin_write);
  num("errors.origin.flush", e.origin_flush);
  num("errors.metadata.write", e.metadata);
}

bool CallerMayChange(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == 0 || cred.uid == geteuid();
}

// Commands that use the engine while it is there (shared with each other,
// exclusive with the shutdown that takes it away).
Status EngineCommand(Daemon& d, int fd, const std::string& cmd,
                     const std::function<void(uint64_t, uint64_t)>& progress) {
  std::shared_lock lock(d.engine_mu);
  if (!d.engine) return Status::Busy("the cache is shutting down");
  if (cmd == "stats reset" && !CallerMayChange(fd)) return Status::Busy("permission denied: run as root");
  if (cmd == "stats" || cmd == "stats reset") {
    SendStats(fd, d);
    if (cmd == "stats reset") {
      d.engine->ResetStats();
      d.backend->ResetCounters();
    }
    return Status::Ok();
  }
  if (auto s = PlacementCommand(*d.engine, cmd, CallerMayChange(fd), DataTo(fd))) return *s;
  if (!CallerMayChange(fd)) return Status::Busy("permission denied: run as root");
  if (cmd == "flush" || cmd == "detach" || cmd == "detach wipe") return d.engine->Flush(progress);
  if (cmd.rfind("set mode ", 0) == 0) {
    Result<CacheMode> m = ParseCacheMode(cmd.substr(9));
    if (!m.ok()) return m.status();
    Log("info", "mode -> " + cmd.substr(9));
    return d.engine->SetMode(m.value(), progress);
  }
  if (cmd.rfind("set cleaner ", 0) == 0) {
    unsigned high = 0, low = 0, batch = 0;
    if (std::sscanf(cmd.c_str() + 11, "%u %u %u", &high, &low, &batch) != 3) {
      return Status::InvalidArgument("set cleaner needs HIGH LOW BATCH");
    }
    return d.engine->SetCleaner(high, low, batch);
  }
  if (cmd.rfind("set seq_cutoff ", 0) == 0) {
    Result<uint64_t> n = ParseSize(cmd.substr(15));
    if (!n.ok()) return n.status();
    return d.engine->SetSequentialCutoff(n.value());
  }
  if (cmd == "stop") return Status::Ok();
  return Status::InvalidArgument("unknown control command '" + cmd + "'");
}

void HandleCommand(Daemon& d, int fd, const std::string& line) {
  Result<std::string> request = ParseRequestLine(line);
  if (!request.ok()) {
    SendLine(fd, "error 2 " + request.status().message());
    return;
  }
  const std::string& cmd = request.value();
  auto progress = [fd](uint64_t left, uint64_t total) {
    SendLine(fd, "progress " + std::to_string(left) + " " + std::to_string(total));
  };
  // detach flushes with progress while still serving, then stops.
  Status s = EngineCommand(d, fd, cmd, progress);
  const bool detach = cmd == "detach" || cmd == "detach wipe";
  if (s.ok() && (cmd == "stop" || detach)) {
    {
      std::lock_guard lock(d.mu);
      s = StopKernelFrontEnd(d);  // refused while mounted: the cache keeps serving
    }
    if (s.ok()) {
      RequestStop(d, detach, cmd == "detach wipe");
      s = WaitStopped(d);
    }
  }
  SendLine(fd, s.ok() ? "ok" : "error " + std::to_string(ExitCodeOf(s)) + " " + s.message());
}

void ControlLoop(Daemon& d) {
  while (true) {
    int fd = accept4(d.control_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;  // closed at shutdown
    }
    // One thread per request: stats never waits behind a flush.
    std::thread([&d, fd] {
      std::string line;
      if (ReadLine(fd, &line)) HandleCommand(d, fd, line);
      close(fd);
    }).detach();
  }
}

void SignalLoop(Daemon& d) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
  Log("info", std::string("signal ") + (sig == SIGTERM ? "TERM" : "INT") + ": stopping");
  Status s;
  {
    std::lock_guard lock(d.mu);
    s = StopKernelFrontEnd(d);
  }
  if (!s.ok()) {
    // The volume is mounted: stopping would pull it from under the
    // filesystem. Keep serving; unmount, then stop.
    Log("error", "not stopping: " + s.message());
    return SignalLoop(d);
  }
  RequestStop(d, false);
}

// Runs in the daemon process; never returns.
[[noreturn]] void RunDaemon(const DaemonSpec& spec, int ready_fd) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // SignalLoop takes them
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  if (std::getenv("CACHECTL_CRASH_AT") || std::getenv("CACHECTL_PAUSE_AT")) SetStepObserver(AtNamedStep);
  Daemon d;
  d.spec = spec;
  Status s = ClaimRunDir(spec.dirs, spec.name, spec.socket_group);
  if (s.ok()) s = Open(d);
  if (s.ok()) {
    // The group may read stats; changes still need root (CallerMayChange).
    Result<int> fd = shim::ListenUnix(spec.dirs.ControlSocket(spec.name),
                                      spec.socket_group >= 0 ? 0660 : 0600, spec.socket_group);
    s = fd.status();
    if (fd.ok()) d.control_fd = fd.value();
  }
  if (!s.ok()) {
    Log("error", s.ToString());
    (void)StopKernelFrontEnd(d);
    if (d.nbd) d.nbd->Stop();
    d.engine.reset();
    d.origin.reset();
    if (!spec.online_volume.empty()) (void)shim::RemoveDevice(HiddenOriginName(spec.name));
    ReportNotices(ready_fd, d);
    Report(ready_fd, s);
    _exit(1);
  }
  FILE* pid = std::fopen((spec.dirs.RunDir(spec.name) + "/pid").c_str(), "w");
  if (pid) {
    std::fprintf(pid, "%d\n", getpid());
    std::fclose(pid);
  }
  Log("info", "serving " + spec.name + " (" + CacheModeName(d.engine->mode()) + ") on " +
                  spec.dirs.NbdSocket(spec.name));
  ReportNotices(ready_fd, d);
  Report(ready_fd, Status::Ok());
  close(ready_fd);

  std::thread(ControlLoop, std::ref(d)).detach();
  std::thread(SignalLoop, std::ref(d)).detach();
  std::unique_lock lock(d.mu);
  d.cv.wait(lock, [&] { return d.stop_requested; });
  bool detach = d.detach;
  lock.unlock();

  d.nbd->Stop();
  Status done = detach ? d.engine->Detach() : d.engine->Shutdown();
  if (done.ok() && detach && d.wipe) done = WipeCacheDevice(d);
  if (!done.ok() && !detach && d.store && d.store->failed()) {
    // The stop the user asked for happened; it could not be recorded as
    // clean, so the next start recovers the store and proves what is fresh.
    Log("warning", "stop: not a clean shutdown: " + done.message());
    done = Status::Ok();
  }
  Log(done.ok() ? "info" : "error", std::string(detach ? "detach" : "stop") + ": " + done.ToString());
  // Close everything (the store's lock above all) before answering, so a
  // 'cachectl start' right after the answer finds it free.
  {
    std::unique_lock engine_lock(d.engine_mu);
    d.engine.reset();
    d.store.reset();
    d.cache.reset();
    d.origin.reset();
  }
  if (!spec.online_volume.empty() && !d.online_swapped) {
    (void)shim::RemoveDevice(HiddenOriginName(spec.name));
  }
  shutdown(d.control_fd, SHUT_RDWR);
  unlink(spec.dirs.ControlSocket(spec.name).c_str());
  unlink((spec.dirs.RunDir(spec.name) + "/pid").c_str());
  rmdir(spec.dirs.RunDir(spec.name).c_str());
  lock.lock();
  d.stopped = true;
  d.stop_status = done;
  d.cv.notify_all();
  lock.unlock();
  // Let the control thread send its answer before the process goes.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  _exit(done.ok() ? 0 : 1);
}

}  // namespace

std::string HiddenOriginName(const std::string& cache_name) { return "cachectl-origin-" + cache_name; }

Status CheckFrontend(const std::string& frontend) {
  if (frontend == "auto" || frontend == "ublk" || frontend == "nbd" || frontend == "socket") {
    return Status::Ok();
  }
  return Status::InvalidArgument("unknown front end '" + frontend + "' (use auto, ublk, nbd or socket)");
}

Result<DaemonSpec> SpecFromConfig(const Dirs& dirs, const std::string& name, CacheConfig& config) {
  Result<int> gid = ResolveGroup(config["group"]);
  if (!gid.ok()) return Status::InvalidArgument(gid.status().message() + " (the socket group given at attach)");
  DaemonSpec spec;
  spec.name = name;
  spec.dirs = dirs;
  spec.origin = config["origin"];
  spec.cache = config["cache"];
  spec.tcp_address = config["nbd_tcp"];
  spec.socket_group = gid.value();
  spec.online_volume = config["online_volume"];
  spec.online_table = config["online_table"];
  spec.engine.line_size = static_cast<uint32_t>(std::strtoul(config["line_size"].c_str(), nullptr, 10));
  spec.frontend = config["frontend"].empty() ? "auto" : config["frontend"];
  return spec;
}

Status LaunchDaemon(const DaemonSpec& spec, std::vector<std::string>* notices) {
  CACHECORE_RETURN_IF_ERROR(MakeDirs(spec.dirs.StateDir(spec.name), 0700));
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return Status::IoError("pipe");
  pid_t child = fork();
  if (child < 0) return Status::IoError("fork failed");
  if (child == 0) {
    close(pipefd[0]);
    setsid();
    if (fork() != 0) _exit(0);  // the daemon is the grandchild: no terminal, ever
    int null = open("/dev/null", O_RDWR);
    int log = open(spec.dirs.LogFile(spec.name).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    dup2(null, 0);
    dup2(null, 1);
    dup2(log >= 0 ? log : null, 2);
    if (chdir("/") != 0) _exit(1);
    RunDaemon(spec, pipefd[1]);
  }
  close(pipefd[1]);
  waitpid(child, nullptr, 0);
  // The same line format as the control protocol: "data notice=TEXT" lines,
  // then "ok" or "error CODE MESSAGE".
  std::string line;
  ReplyLine reply;
  bool got = false;
  while ((got = ReadLine(pipefd[0], &line))) {
    reply = ParseReplyLine(line);
    if (reply.kind != ReplyLine::kData) break;
    if (notices && reply.text.rfind("notice=", 0) == 0) notices->push_back(reply.text.substr(7));
  }
  close(pipefd[0]);
  if (!got) return Status::IoError("the daemon died while starting; see " + spec.dirs.LogFile(spec.name));
  if (reply.kind == ReplyLine::kOk) return Status::Ok();
  if (reply.kind != ReplyLine::kError) return Status::IoError("the daemon said: " + line);
  const std::string& msg = reply.text;
  switch (reply.exit_code) {
    case kExitNotFound: return Status::NotFound(msg);
    case kExitRefused: return Status::Busy(msg);
    case 2: return Status::InvalidArgument(msg);
    default: return Status::IoError(msg);
  }
}

}  // namespace cachectl
