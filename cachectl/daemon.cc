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
#include "daemon_state.h"
#include "kernel_frontend.h"
#include "placement_control.h"
#include "shim/dm_device.h"
#include "shim/engine_backend.h"
#include "shim/socket_io.h"

namespace cachectl {

using namespace cachecore;

void Log(const char* level, const std::string& msg) {
  char when[32];
  std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", std::gmtime(&now));
  std::fprintf(stderr, "%s %s %s\n", when, level, msg.c_str());
  std::fflush(stderr);
}

namespace {


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
