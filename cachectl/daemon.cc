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
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "cachecore/devices/file_device.h"
#include "cachecore/devices/open_device.h"
#include "cachecore/engine/steps.h"
#include "cachecore/metadata/superblock.h"
#include "cachecore/devices/wipe.h"
#include "cli_common.h"
#include "control.h"
#include "daemon_control.h"
#include "daemon_state.h"
#include "kernel_frontend.h"
#include "prometheus.h"
#include "stats_view.h"
#include "protocol.h"
#include "daemon_volumes.h"
#include "request_dispatch.h"
#include "shim/dm_device.h"
#include "shim/engine_backend.h"
#include "shim/nbd_server.h"
#include "shim/socket_io.h"

namespace cachectl {

using namespace cachecore;

namespace {
// The journal's stream when systemd started the daemon (its stderr was the
// journal's, JOURNAL_STREAM says so): -1 otherwise.
int journal_fd = -1;

// sd-daemon(3)'s prefixes: the journal takes them as the line's priority.
const char* SyslogPrefix(const char* level) {
  if (std::strcmp(level, "error") == 0) return "<3>";
  if (std::strcmp(level, "warning") == 0) return "<4>";
  return "<6>";
}

// Keeps the journal's stream as the daemon's stderr goes to its log file.
void KeepJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  struct stat st {};
  if (stream == nullptr || fstat(STDERR_FILENO, &st) != 0) return;
  const std::string ours = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  if (ours == stream) journal_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
}
}  // namespace

void Log(const char* level, const std::string& msg) {
  char when[32];
  std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", std::gmtime(&now));
  std::fprintf(stderr, "%s %s %s\n", when, level, msg.c_str());
  std::fflush(stderr);
  if (journal_fd >= 0) {
    const std::string line = SyslogPrefix(level) + msg + "\n";  // the journal stamps it
    (void)!write(journal_fd, line.data(), line.size());
  }
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

// /metrics (attach --listen): the stats of this cache as `stats
// --prometheus` prints them, but every counter from the daemon's start.
Status StartMetrics(Daemon& d) {
  CACHECORE_RETURN_IF_ERROR(CheckMetricsListen(d.spec));
  auto server = MetricsServer::Start(d.spec.metrics_listen, [&d] {
    Fields f{{"name", d.spec.name}};
    Result<StatsReply> stats = DaemonControl(d).StatsSinceStart();
    if (stats.ok()) f.insert(f.end(), stats->fields.begin(), stats->fields.end());
    else f.push_back({"state", "stopped"});
    return PrometheusText({f});
  });
  if (!server.ok()) return server.status();
  d.metrics = std::move(server.value());
  return Status::Ok();
}

// The hidden devices of online volumes that have their own tables again
// (their origins closed first): made again at the next start.
std::vector<std::string> HiddenOriginsToDrop(const Daemon& d) {
  std::vector<std::string> hidden;
  if (!d.spec.online_volume.empty() && !d.front.online_swapped) hidden.push_back(HiddenOriginName(d.spec.name));
  for (const auto& [name, v] : d.added_volumes) {
    if (!v.listed.online_volume.empty() && !v.front.online_swapped) {
      hidden.push_back(HiddenOriginName(d.spec.name, name));
    }
  }
  return hidden;
}

Status Open(Daemon& d) {
  if (!d.spec.online_volume.empty() && !shim::DeviceExists(HiddenOriginName(d.spec.name))) {
    Result<shim::DmTable> table = shim::DecodeTable(d.spec.online_table);
    if (!table.ok()) return table.status();
    CACHECORE_RETURN_IF_ERROR(shim::CreateDevice(HiddenOriginName(d.spec.name), table.value()));
  }
  auto origin = OpenOriginDevice(d.spec.origin);
  if (!origin.ok()) return origin.status();
  auto cache = OpenFileDevice(d.spec.cache);
  if (!cache.ok()) return cache.status();
  d.origin = std::move(origin.value());
  d.cache = std::move(cache.value());
  MetadataOptions mo;
  mo.create_if_missing = d.spec.create;
  mo.defer_compactions = !d.spec.create;  // Engine::Open allows them once it has read the records
  auto store = MetadataStore::Open(d.spec.dirs.Metadata(d.spec.name), mo);
  if (!store.ok()) return store.status();
  d.store = std::move(store.value());
  // The key first: a start with another key, or none, writes nothing
  // (not even a repaired superblock).
  if (!d.spec.key.empty()) {
    Result<std::shared_ptr<const cachecore::CacheKey>> key = LoadCacheKey(d.spec.key);
    if (!key.ok()) return key.status();
    d.spec.engine.key = key.value();
  }
  if (!d.spec.create) CACHECORE_RETURN_IF_ERROR(cachecore::CheckKeyWithStore(d.store.get(), d.spec.engine.key.get()));
  if (!d.spec.create) CACHECORE_RETURN_IF_ERROR(RepairDamagedSuperblock(d));
  EngineDevices devices{d.origin.get(), d.cache.get(), d.store.get()};
  CACHECORE_RETURN_IF_ERROR(OpenAddedVolumes(d, devices));
  auto engine = d.spec.create ? Engine::Create(devices, d.spec.engine, d.spec.replace)
                              : Engine::Open(devices, d.spec.engine);
  if (!engine.ok()) return engine.status();
  {
    // /metrics may be scraped already: it sees the engine with its backend, or neither.
    auto backend = std::make_unique<shim::EngineBackend>(engine.value().get());
    std::unique_lock engine_lock(d.engine_mu);
    d.engine = std::move(engine.value());
    d.backend = std::move(backend);
  }
  shim::NbdServerOptions o;
  o.export_name = d.spec.name;
  o.unix_path = d.spec.dirs.NbdSocket(d.spec.name);
  // Again at every start: a name that was a loopback address at attach
  // may resolve to another since.
  CACHECORE_RETURN_IF_ERROR(CheckTcpExport(d.spec));
  o.tcp_address = d.spec.tcp_address;
  Result<std::shared_ptr<const shim::NbdTls>> tls = LoadTls(d.spec);
  if (!tls.ok()) return tls.status();
  o.tls = tls.value();
  o.max_connections = d.spec.nbd_connections;
  if (d.spec.socket_group >= 0) {
    o.socket_mode = 0660;
    o.socket_group = d.spec.socket_group;
  }
  auto nbd = shim::NbdServer::Start(d.backend.get(), o);
  if (!nbd.ok()) return nbd.status();
  d.nbd = std::move(nbd.value());
  d.front = FrontEndFor(d, d.spec.name, d.backend.get(), d.engine->identity().origin_size, d.spec.online_volume,
                        d.spec.online_table);
  Status front = StartKernelFrontEnd(d.front);
  {
    std::lock_guard lock(d.volumes_mu);
    PublishFrontEnd(d);
  }
  CACHECORE_RETURN_IF_ERROR(front);
  return ServeAddedVolumes(d);
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

// What the daemon did on its way up that its starter should show, then
// "ok" or "error": the answer LaunchDaemon reads from the pipe.
void ReportStart(int fd, const Daemon& d, const Status& s) {
  std::string answer = EncodeReply(StartupReply{d.notices}) + EncodeEnd(s);
  (void)shim::WriteFull(fd, answer.data(), answer.size());
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

bool CallerMayChange(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == 0 || cred.uid == geteuid();
}

// The control socket's limits: a request is one line (kMaxLineBytes), a
// client that sends nothing or reads nothing lets its thread go after a
// timeout, and a bounded number of connections are served at once (a
// member of the socket's group must not exhaust the daemon's threads).
constexpr int kMaxControlConnections = 32;
// Beyond the limit, places only for callers who may change the cache
// (root): a group member holding every place cannot lock root out.
constexpr int kRootReserve = 4;
constexpr std::chrono::seconds kControlReadTime{5};
constexpr timeval kControlWriteTimeout{30, 0};

void ServeControlConnection(Daemon& d, int fd) {
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &kControlWriteTimeout, sizeof(kControlWriteTimeout));
  std::string line;
  if (ReadLineBefore(fd, &line, std::chrono::steady_clock::now() + kControlReadTime)) {
    DaemonControl target(d);
    ServeRequest(line, CallerMayChange(fd), target,
                 [fd](const std::string& answer) { (void)shim::WriteFull(fd, answer.data(), answer.size()); });
  }
  close(fd);
  d.control_connections.fetch_sub(1);
}

void ControlLoop(Daemon& d) {
  while (true) {
    int fd = accept4(d.control_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;  // closed at shutdown
    }
    const int open = d.control_connections.fetch_add(1);
    if (open >= kMaxControlConnections + kRootReserve ||
        (open >= kMaxControlConnections && !CallerMayChange(fd))) {
      d.control_connections.fetch_sub(1);
      // A fresh socket's buffer takes this short line without blocking.
      const std::string answer = EncodeEnd(Status::Busy(
          "the daemon is serving " + std::to_string(kMaxControlConnections) + " control requests already; try again"));
      (void)shim::WriteFull(fd, answer.data(), answer.size());
      close(fd);
      continue;
    }
    // One thread per request: stats never waits behind a flush.
    std::thread(ServeControlConnection, std::ref(d), fd).detach();
  }
}

// Runs `tick` now and then every `seconds` (the variable `env` sets it, for
// tests) until the daemon stops.
void EveryUntilStop(Daemon& d, const char* env, int seconds, const std::function<void()>& tick) {
  const char* set = std::getenv(env);
  const auto every = std::chrono::seconds(set ? std::max(1, std::atoi(set)) : seconds);
  for (;;) {
    tick();
    std::unique_lock lock(d.mu);
    if (d.cv.wait_for(lock, every, [&] { return d.stop_requested; })) return;
  }
}

// Logs each rise of an error counter (errors.cache.read and the others),
// so that the log, and the journal under systemd, show I/O errors as they
// come, not only `stats`. Every 10 s until the daemon stops.
void ErrorWatch(Daemon& d) {
  std::map<std::string, uint64_t> seen;
  EveryUntilStop(d, "CACHECTL_ERROR_WATCH_SECONDS", 10, [&] {
    Result<StatsReply> stats = DaemonControl(d).StatsSinceStart();
    if (!stats.ok()) return;
    for (const auto& [key, value] : stats->fields) {
      if (key.rfind("errors.", 0) != 0) continue;
      const uint64_t now = std::strtoull(value.c_str(), nullptr, 10);
      if (now > seen[key]) {
        Log(key.find("repaired") == std::string::npos ? "error" : "warning",
            key.substr(7) + ": " + std::to_string(now - seen[key]) + " more (" + std::to_string(now) +
                " since start)");
      }
      seen[key] = now;
    }
  });
}

// A minute of history (stats --history) a minute, from the engine's
// counters, until the daemon stops.
void HistorySampler(Daemon& d) {
  EveryUntilStop(d, "CACHECTL_HISTORY_SECONDS", 60, [&] {
    Result<StatsReply> stats = DaemonControl(d).StatsSinceStart();
    if (!stats.ok()) return;
    FieldView f(stats->fields);
    HistoryMinute now;
    now.minute_start = static_cast<int64_t>(std::time(nullptr));
    now.read_hits = f.Count("read_hits");
    now.read_misses = f.Count("read_misses");
    now.write_hits = f.Count("write_hits");
    now.write_misses = f.Count("write_misses");
    now.dirty_lines = f.Count("dirty_lines");
    now.cleaner_writes = f.Count("cleaner_writes");
    now.cleaned_bytes = f.Count("cleaned_bytes");
    d.history.Add(now);
  });
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
    s = StopFrontEnds(d);
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
  // Before any device is touched: an attach whose --listen cannot be
  // served changes nothing. At a start the cache serves all the same (its
  // volume matters more than its metrics), and the starter hears why.
  if (s.ok() && !spec.metrics_listen.empty()) {
    Status metrics = StartMetrics(d);
    if (!metrics.ok() && spec.create) s = metrics;
    if (!metrics.ok() && !spec.create) {
      Log("warning", "/metrics is not served: " + metrics.message());
      d.notices.push_back("/metrics is not served: " + metrics.message());
    }
  }
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
    if (d.control_fd >= 0) unlink(spec.dirs.ControlSocket(spec.name).c_str());
    if (!StopFrontEnds(d).ok()) AbandonFrontEnds(d);
    if (d.metrics) d.metrics->Stop();
    if (d.nbd) d.nbd->Stop();
    d.engine.reset();
    d.origin.reset();
    std::vector<std::string> hidden = HiddenOriginsToDrop(d);
    d.added_volumes.clear();
    for (const std::string& name : hidden) (void)shim::RemoveDevice(name);
    ReportStart(ready_fd, d, s);
    _exit(1);
  }
  FILE* pid = std::fopen((spec.dirs.RunDir(spec.name) + "/pid").c_str(), "w");
  if (pid) {
    std::fprintf(pid, "%d\n", getpid());
    std::fclose(pid);
  }
  Log("info", std::string(spec.create ? "attached: " : "started: ") + spec.origin + " cached on " + spec.cache +
                  "; serving " + spec.name + " (" + CacheModeName(d.engine->mode()) + ") on " +
                  spec.dirs.NbdSocket(spec.name));
  ReportStart(ready_fd, d, Status::Ok());
  close(ready_fd);

  std::thread(ControlLoop, std::ref(d)).detach();
  std::thread(SignalLoop, std::ref(d)).detach();
  std::thread error_watch(ErrorWatch, std::ref(d));
  std::thread history_sampler(HistorySampler, std::ref(d));
  std::unique_lock lock(d.mu);
  d.cv.wait(lock, [&] { return d.stop_requested; });
  bool detach = d.detach;
  lock.unlock();
  // They stop at stop_requested: joined, none is reading stats while the
  // engine shuts down.
  error_watch.join();
  history_sampler.join();

  if (d.metrics) d.metrics->Stop();
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
  std::vector<std::string> hidden;
  {
    std::unique_lock engine_lock(d.engine_mu);
    d.engine.reset();
    d.store.reset();
    d.cache.reset();
    d.origin.reset();
    std::lock_guard volumes_lock(d.volumes_mu);
    hidden = HiddenOriginsToDrop(d);
    d.added_volumes.clear();
  }
  for (const std::string& name : hidden) (void)shim::RemoveDevice(name);
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

Status StopDaemon(Daemon& d, bool detach, bool wipe) {
  Status s;
  {
    std::lock_guard lock(d.mu);
    s = StopFrontEnds(d);  // refused while mounted: the cache keeps serving
  }
  if (!s.ok()) return s;
  RequestStop(d, detach, wipe);
  return WaitStopped(d);
}

Status CheckFrontend(const std::string& frontend) {
  if (frontend == "auto" || frontend == "ublk" || frontend == "nbd" || frontend == "socket") {
    return Status::Ok();
  }
  return Status::InvalidArgument("unknown front end '" + frontend + "' (use auto, ublk, nbd or socket)");
}

// --nbd-tcp: plain NBD carries the volume's data unencrypted and serves
// whoever connects, so only on a loopback address unless TLS or --insecure.
Status CheckTcpExport(const DaemonSpec& spec) {
  const std::string& tcp = spec.tcp_address;
  const bool tls = !spec.tls_psk.empty() || !spec.tls_cert.empty();
  if (tcp.empty()) {
    if (tls) return Status::InvalidArgument("--tls-psk and --tls-cert secure --nbd-tcp, which is not given");
    return Status::Ok();
  }
  if (!spec.tls_psk.empty() && !spec.tls_cert.empty()) {
    return Status::InvalidArgument("--tls-psk and --tls-cert exclude each other");
  }
  Result<bool> loopback = shim::IsLoopbackTcp(tcp);
  if (!loopback.ok()) return Status::InvalidArgument("--nbd-tcp " + loopback.status().message());
  if (loopback.value() || tls || spec.tcp_insecure) return Status::Ok();
  return Status::InvalidArgument("--nbd-tcp " + tcp + " is reached from other hosts, and NBD without TLS is "
                                 "neither encrypted nor authenticated: give --tls-psk FILE or --tls-cert DIR, "
                                 "a loopback address, or --insecure on a network you trust");
}

Status CheckMetricsListen(const DaemonSpec& spec) {
  if (spec.metrics_listen.empty()) return Status::Ok();
  Result<bool> loopback = shim::IsLoopbackTcp(spec.metrics_listen);
  if (!loopback.ok()) return Status::InvalidArgument("--listen " + loopback.status().message());
  if (loopback.value() || spec.tcp_insecure) return Status::Ok();
  return Status::InvalidArgument("--listen " + spec.metrics_listen + " is reached from other hosts, and /metrics "
                                 "has no authentication: give a loopback address (and let the scraper reach it "
                                 "another way), or --insecure on a network you trust");
}

Result<std::shared_ptr<const shim::NbdTls>> LoadTls(const DaemonSpec& spec) {
  if (!spec.tls_psk.empty()) return shim::LoadNbdTlsPsk(spec.tls_psk);
  if (!spec.tls_cert.empty()) return shim::LoadNbdTlsCertificates(spec.tls_cert);
  return std::shared_ptr<const shim::NbdTls>();
}

Result<unsigned> ParseNbdConnections(const std::string& text) {
  char* end = nullptr;
  const unsigned long n = std::strtoul(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || n < 1 || n > 1024) {
    return Status::InvalidArgument("--nbd-connections '" + text + "': give 1 to 1024 clients");
  }
  return static_cast<unsigned>(n);
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
  // Caches attached before the loopback rule keep the address they were given.
  auto insecure = config.find("nbd_tcp_insecure");
  spec.tcp_insecure = insecure == config.end() || insecure->second == "1";
  spec.tls_psk = config["nbd_tls_psk"];
  spec.metrics_listen = config["metrics_listen"];
  spec.tls_cert = config["nbd_tls_cert"];
  if (!config["nbd_connections"].empty()) {
    Result<unsigned> n = ParseNbdConnections(config["nbd_connections"]);
    if (!n.ok()) return Status::InvalidArgument(n.status().message() + " (nbd_connections in the saved configuration)");
    spec.nbd_connections = n.value();
  }
  spec.socket_group = gid.value();
  spec.online_volume = config["online_volume"];
  spec.online_table = config["online_table"];
  spec.engine.line_size = static_cast<uint32_t>(std::strtoul(config["line_size"].c_str(), nullptr, 10));
  spec.frontend = config["frontend"].empty() ? "auto" : config["frontend"];
  spec.key = {config["key_file"], config["key_keyring"]};
  return spec;
}

Status LaunchDaemon(const DaemonSpec& spec, std::vector<std::string>* notices) {
  CACHECORE_RETURN_IF_ERROR(CheckName(spec.name));  // its paths are built from it
  CACHECORE_RETURN_IF_ERROR(MakeDirs(spec.dirs.StateDir(spec.name), 0700));
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return Status::IoError("pipe");
  pid_t child = fork();
  if (child < 0) return Status::IoError("fork failed");
  if (child == 0) {
    close(pipefd[0]);
    setsid();
    if (fork() != 0) _exit(0);  // the daemon is the grandchild: no terminal, ever
    KeepJournal();
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
  // The control protocol's answer: notices, then "ok" or "error".
  Result<ControlReply> answer = ReadAnswer(pipefd[0]);
  close(pipefd[0]);
  if (!answer.ok()) return Status::IoError("the daemon died while starting; see " + spec.dirs.LogFile(spec.name));
  Result<StartupReply> started = DecodeStartupReply(answer->data);
  if (notices && started.ok()) notices->insert(notices->end(), started->notices.begin(), started->notices.end());
  if (answer->exit_code == kExitOk) return Status::Ok();
  return StatusOfExitCode(answer->exit_code, answer->message);
}

}  // namespace cachectl
