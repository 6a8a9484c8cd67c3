// attach, start, stop, detach, flush, set: the commands that start a cache's
// daemon or ask it to change something.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <variant>

#include "cachecore/placement/placement.h"
#include "cachecore/devices/file_device.h"
#include "cachecore/engine/cache_mode.h"
#include "cachecore/devices/nbd_device.h"
#include "cachecore/metadata/superblock.h"
#include "cachecore/devices/wipe.h"
#include "cache_checks.h"
#include "cli_common.h"
#include "export_commands.h"
#include "shim/socket_io.h"
#include "damage_cli.h"
#include "commands.h"
#include "control.h"
#include "daemon.h"
#include "shim/dm_device.h"

namespace cachectl {

namespace po = boost::program_options;
using namespace cachecore;

namespace {

bool SameDevice(const struct stat& a, const struct stat& b) {
  if (S_ISBLK(a.st_mode) && S_ISBLK(b.st_mode)) return a.st_rdev == b.st_rdev;
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace

Status CheckDevices(const Dirs& dirs, const std::string& origin, const std::string& cache,
                    const std::string& adding_to) {
  struct stat so {}, sc {};
  if (IsNbdUri(cache)) return Status::InvalidArgument("the cache must be a local file or block device, not " + cache);
  const bool network_origin = IsNbdUri(origin);
  if (network_origin) {
    // A network volume: it must answer now.
    Result<std::unique_ptr<BlockDevice>> probe = OpenNbdDevice(origin);
    if (!probe.ok()) return Status::NotFound("origin " + probe.status().message());
  } else if (stat(origin.c_str(), &so) != 0) {
    return Status::NotFound("origin " + origin + " does not exist");
  }
  if (stat(cache.c_str(), &sc) != 0) return Status::NotFound("cache " + cache + " does not exist");
  if (!network_origin && SameDevice(so, sc)) {
    return Status::InvalidArgument("origin and cache are the same device (" + origin + ")");
  }
  if (!network_origin && S_ISBLK(so.st_mode) && !shim::DmNameOf(origin)) {
    // Only a device-mapper volume can be interposed while in use.
    int fd = open(origin.c_str(), O_RDONLY | O_EXCL | O_CLOEXEC);
    if (fd < 0 && errno == EBUSY) {
      return Status::Busy(origin + " is in use (mounted?) and is not a device-mapper volume, so it "
                          "cannot be cached online: unmount it, attach, then mount /dev/mapper/NAME");
    }
    if (fd >= 0) close(fd);
  }
  const std::optional<std::string> dm = network_origin ? std::nullopt : shim::DmNameOf(origin);
  for (const std::string& other : ListCaches(dirs)) {
    Result<CacheConfig> c = LoadConfig(dirs.ConfigFile(other));
    if (!c.ok()) continue;
    // A cache's volumes' origins are its origins too.
    std::vector<std::pair<std::string, std::string>> used = {{"origin", c.value()["origin"]}, {"cache", c.value()["cache"]}};
    std::vector<std::string> online = {c.value()["online_volume"]}, own = {other};  // dm devices it uses, and makes
    Result<std::vector<ListedVolume>> added = LoadListedVolumes(dirs, other);
    for (const ListedVolume& v : added.ok() ? added.value() : std::vector<ListedVolume>{}) {
      used.push_back({"volume " + v.name, v.origin});
      (v.online_volume.empty() ? own : online).push_back(v.online_volume.empty() ? v.name : v.online_volume);
    }
    if (dm && std::find(online.begin(), online.end(), *dm) != online.end()) {
      return Status::Busy("/dev/mapper/" + *dm + " is cached already, by cache '" + other + "'");
    }
    if (dm && std::find(own.begin(), own.end(), *dm) != own.end()) {
      return Status::Busy("/dev/mapper/" + *dm + " is served by cache '" + other + "'; it cannot be its own origin");
    }
    for (const auto& [role, used_path] : used) {
      if (network_origin && used_path == origin) {
        return Status::Busy(origin + " is in use by cache '" + other + "' (its " + role + "); detach that cache first");
      }
      struct stat st {};
      if (stat(used_path.c_str(), &st) != 0) continue;
      for (auto [path, mine] : {std::pair{&origin, &so}, std::pair{&cache, &sc}}) {
        if (path == &origin && network_origin) continue;
        if (path == &cache && other == adding_to) continue;  // the cache a volume is added to
        if (SameDevice(st, *mine)) {
          return Status::Busy(*path + " is in use by cache '" + other + "' (its " + role +
                              "); detach that cache first");
        }
      }
    }
  }
  return Status::Ok();
}

namespace {

std::string Absolute(const std::string& path) {
  if (IsNbdUri(path)) return path;
  std::error_code ec;
  auto p = std::filesystem::absolute(path, ec);
  return ec ? path : p.string();
}

// The cleaner's settings, as attach and set take them.
void AddCleanerOptions(po::options_description& desc) {
  desc.add_options()
      ("dirty-target", po::value<uint32_t>(), "the cleaner holds dirty lines near this percent (default 10)")
      ("dirty-low", po::value<uint32_t>(), "above this percent of lines dirty the cleaner runs flat out (default 40)")
      ("dirty-high", po::value<uint32_t>(), "above this percent write-back writes are slowed down (default 60)")
      ("cleaner-batch", po::value<uint32_t>(), "lines per cleaner pass (default 64)");
}

// The cleaner options given, each into its field (the others untouched).
void TakeCleanerOptions(const po::variables_map& vm, std::optional<uint32_t>& target,
                        std::optional<uint32_t>& high, std::optional<uint32_t>& low,
                        std::optional<uint32_t>& batch) {
  auto take = [&](const char* option, std::optional<uint32_t>& field) {
    if (vm.count(option)) field = vm[option].as<uint32_t>();
  };
  take("dirty-target", target);
  take("dirty-high", high);
  take("dirty-low", low);
  take("cleaner-batch", batch);
}

// attach's cleaner options over the defaults, refused as set refuses them.
Status CleanerOptionsInto(const po::variables_map& vm, EngineConfig& cfg) {
  std::optional<uint32_t> target, high, low, batch;
  TakeCleanerOptions(vm, target, high, low, batch);
  cfg.dirty_target_pct = target.value_or(cfg.dirty_target_pct);
  cfg.dirty_high_pct = high.value_or(cfg.dirty_high_pct);
  cfg.dirty_low_pct = low.value_or(cfg.dirty_low_pct);
  cfg.cleaner_batch_lines = batch.value_or(cfg.cleaner_batch_lines);
  return Engine::CheckCleaner({cfg.dirty_target_pct, cfg.dirty_high_pct, cfg.dirty_low_pct, cfg.cleaner_batch_lines});
}

// --encrypt with one of --key-file and --key-keyring, or none of the three.
Result<KeySource> KeySourceOf(const po::variables_map& vm) {
  KeySource key;
  if (vm.count("key-file")) key.file = Absolute(vm["key-file"].as<std::string>());
  if (vm.count("key-keyring")) key.keyring = vm["key-keyring"].as<std::string>();
  if (!key.file.empty() && !key.keyring.empty()) return Status::InvalidArgument("give --key-file or --key-keyring, not both");
  if (vm.count("encrypt") && key.empty()) return Status::InvalidArgument("--encrypt needs --key-file FILE or --key-keyring NAME");
  if (!vm.count("encrypt") && !key.empty()) return Status::InvalidArgument("--key-file and --key-keyring go with --encrypt");
  if (vm.count("key-keyring") && key.keyring.empty()) return Status::InvalidArgument("--key-keyring: the key's name is empty");
  if (vm.count("key-file") && vm["key-file"].as<std::string>().empty()) return Status::InvalidArgument("--key-file: no file given");
  return key;
}

// What the daemon serves, from its stats: the kernel device if any, the
// NBD socket, and the write-back warning.
void PrintServing(const Dirs& dirs, const std::string& name, const StatsReply& reply) {
  std::string dm = reply.Value("dm_device"), kernel = reply.Value("kernel_device");
  Result<CacheMode> mode = ParseCacheMode(reply.Value("mode"));
  if (!dm.empty()) std::printf("  block device: %s (over %s)\n", dm.c_str(), kernel.c_str());
  else std::printf("  front end: the NBD socket alone (no kernel NBD or device-mapper here)\n");
  std::printf("  NBD socket: %s (nbd+unix:///%s?socket=%s)\n", dirs.NbdSocket(name).c_str(),
              name.c_str(), dirs.NbdSocket(name).c_str());
  if (mode.ok() && mode.value() == CacheMode::kWriteBack) {
    std::printf("  write-back: written data lives only on the cache until it is flushed "
                "('cachectl flush %s'); losing the cache device before then loses it\n",
                name.c_str());
  }
}

// Whether the cache device a cache was attached with still holds a cachectl
// superblock: false once a detach has released it.
Result<bool> CacheDeviceHoldsCache(const std::string& cache_path) {
  FileDeviceOptions ro;
  ro.read_only = true;
  auto device = OpenFileDevice(cache_path, ro);
  if (!device.ok()) return device.status();
  Result<Superblock> sb = ReadSuperblock(device->get());
  if (sb.ok()) return true;
  if (sb.status().code() == StatusCode::kNotFound) return false;
  return sb.status();
}

// Erases the superblock a failed attach left on `path`; best effort, the
// attach's own error is what the user needs to see.
void ReleaseCacheDevice(const std::string& path) {
  Result<bool> holds = CacheDeviceHoldsCache(path);
  if (!holds.ok() || !holds.value()) return;
  auto device = OpenFileDevice(path);
  if (device.ok()) (void)EraseSuperblock(device->get());
}

int Attach(const std::vector<std::string>& args) {
  std::string origin, cache, name, mode_text = "writethrough", line_text = "64K", tcp, frontend = "auto", group;
  std::string connections_text = std::to_string(kDefaultNbdConnections);
  std::string ram_text = "off";
  uint32_t overprovision = 0;
  CommonOptions common;
  po::options_description desc = common.Describe(
      "cachectl attach --origin DEV --cache DEV [--name NAME] [--mode MODE] [--line-size SIZE] "
      "[--overprovision PCT] [--ram-cache SIZE]\n                [--dirty-target PCT] [--dirty-low PCT] "
      "[--dirty-high PCT] [--cleaner-batch LINES] [--force]\n\nexample: cachectl attach --origin /dev/vg0/data --cache /dev/nvme0n1p2 "
      "--mode writeback --name data");
  desc.add_options()
      ("origin", po::value(&origin)->required(), "the volume to cache (its data is kept): a file, a block "
       "device, or an NBD URI (nbd://HOST[:PORT]/EXPORT, nbd+unix:///EXPORT?socket=PATH)")
      ("cache", po::value(&cache)->required(), "the SSD device or file (its contents are replaced)")
      ("name", po::value(&name), "cache name (default: from the origin's file name)")
      ("mode", po::value(&mode_text), "writethrough (default), writeback, writearound, readonly, passthrough (or wt, wb, wa, ro, pt)")
      ("line-size", po::value(&line_text), "cache line size, 4K to 1M (default 64K)")
      ("nbd-tcp", po::value(&tcp), "also serve NBD on this host:port (never without this option); a loopback "
       "address unless --insecure")
      ("tls-psk", po::value<std::string>(), "with --nbd-tcp: TCP clients must use TLS with a key from this "
       "file of username:hexkey lines (psktool's, as nbdkit and qemu-nbd take)")
      ("tls-cert", po::value<std::string>(), "with --nbd-tcp: TCP clients must use TLS with X.509 certificates "
       "from this directory (ca-cert.pem, server-cert.pem, server-key.pem; clients need a certificate the CA signed)")
      ("listen", po::value<std::string>(), "serve Prometheus metrics at http://HOST:PORT/metrics (a loopback "
       "address unless --insecure)")
      ("insecure", "with --nbd-tcp or --listen: allow an address other hosts reach (NBD without TLS is neither "
       "encrypted nor authenticated; /metrics has no authentication)")
      ("group", po::value(&group), "this group may use the NBD socket and read stats (default: root only)")
      ("nbd-connections", po::value(&connections_text), "NBD clients served at once, 1-1024 (default 32); "
       "more are turned away as they connect")
      ("frontend", po::value(&frontend), "auto (default): ublk, else kernel NBD, as /dev/mapper/NAME where "
       "the kernel has them and device-mapper, else the NBD socket alone; ublk or nbd: that one or fail; socket")
      ("overprovision", po::value(&overprovision), "leave this share of the SSD unused, 0-90 % (discarded "
       "once; see cachectl probe --overprovision-sweep)")
      ("ram-cache", po::value(&ram_text), "a RAM tier above the SSD: a read cache of the hottest blocks in this "
       "much memory, at least 4M (default off; cachectl set --ram-cache changes it)")
      ("force", "replace a cache device that holds another (clean) cache")
      ("encrypt", "encrypt the cached data on the cache device (AES-256-XTS), with --key-file or --key-keyring; "
       "every start reads the key again")
      ("key-file", po::value<std::string>(), "with --encrypt: a file of 32 to 4096 random bytes, readable by root "
       "only (head -c 64 /dev/urandom > FILE; chmod 600 FILE)")
      ("key-keyring", po::value<std::string>(), "with --encrypt: a 'user' key of that name in root's kernel keyring "
       "(keyctl padd user NAME @u < FILE)");
  AddCleanerOptions(desc);
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "attach"); rc >= 0) return rc;
  if (overprovision > 90) return Fail(kExitUsage, "attach: --overprovision must be 0 to 90 (percent of the SSD)");
  std::optional<std::string> volume = IsNbdUri(origin) ? std::nullopt : shim::DmNameOf(origin);
  if (name.empty() && IsNbdUri(origin)) return Fail(kExitUsage, "attach: an NBD origin needs --name");
  if (name.empty()) name = volume ? *volume : NameFromPath(origin);
  Result<CacheMode> mode = ParseCacheMode(mode_text);
  Result<uint64_t> line = ParseSize(line_text);
  Result<int> gid = ResolveGroup(group);
  Result<unsigned> connections = ParseNbdConnections(connections_text);
  Result<uint64_t> ram = ParseRamCache(ram_text);
  DaemonSpec spec;
  spec.tcp_address = tcp;
  spec.tcp_insecure = vm.count("insecure") > 0;
  if (vm.count("tls-psk")) spec.tls_psk = Absolute(vm["tls-psk"].as<std::string>());
  if (vm.count("tls-cert")) spec.tls_cert = Absolute(vm["tls-cert"].as<std::string>());
  if (vm.count("listen")) spec.metrics_listen = vm["listen"].as<std::string>();
  const Status cleaner = CleanerOptionsInto(vm, spec.engine);
  for (const Status& s : {CheckName(name), mode.status(), line.status(), CheckFrontend(frontend), gid.status(),
                          connections.status(), ram.status(), cleaner, CheckTcpExport(spec), CheckMetricsListen(spec)}) {
    if (!s.ok()) return Fail(kExitUsage, "attach: " + s.message());
  }
  // The encryption key, read now: a wrong one changes no device.
  if (Result<KeySource> key = KeySourceOf(vm); !key.ok()) {
    return Fail(kExitUsage, "attach: " + key.status().message());
  } else if (spec.key = key.value(); !spec.key.empty()) {
    Result<std::shared_ptr<const cachecore::CacheKey>> loaded = LoadCacheKey(spec.key);
    if (!loaded.ok()) return Fail(ExitCodeOf(loaded.status()), "attach: " + loaded.status().message());
  }
  // A key or certificate that cannot serve is said now, before any device changes.
  if (Result<std::shared_ptr<const shim::NbdTls>> tls = LoadTls(spec); !tls.ok()) {
    return Fail(ExitCodeOf(tls.status()), "attach: " + tls.status().message());
  }
  Dirs dirs = common.dirs();
  if (int rc = common.RequireRoot("attach"); rc != 0) return rc;
  if (access(dirs.ConfigFile(name).c_str(), F_OK) == 0) {
    return Fail(kExitRefused, "attach: a cache named '" + name + "' exists already");
  }
  Status devices = CheckDevices(dirs, origin, cache);
  if (!devices.ok()) return Fail(ExitCodeOf(devices), "attach: " + devices.message());
  spec.name = name;
  spec.dirs = dirs;
  spec.origin = Absolute(origin);
  spec.cache = Absolute(cache);
  spec.create = true;
  spec.replace = vm.count("force") ? Replace::kCleanCache : Replace::kNothing;
  spec.engine.mode = mode.value();
  spec.engine.line_size = static_cast<uint32_t>(line.value());
  spec.engine.overprovision_pct = overprovision;
  spec.engine.ram_cache_bytes = ram.value();
  spec.nbd_connections = connections.value();
  spec.frontend = frontend;
  spec.socket_group = gid.value();
  if (volume) {
    // Online: the volume keeps its name and its users; a hidden device
    // with its current table becomes the origin.
    Result<shim::DmTable> table = shim::GetTable(*volume);
    if (!table.ok()) return Fail(ExitCodeOf(table.status()), "attach: " + table.status().message());
    if (frontend == "socket") return Fail(kExitUsage, "attach: an online volume needs a kernel front end (not --frontend socket)");
    spec.online_volume = *volume;
    spec.online_table = shim::EncodeTable(table.value());
    spec.origin = "/dev/mapper/" + HiddenOriginName(name);
  }
  Result<bool> held_before = CacheDeviceHoldsCache(spec.cache);
  Status launched = LaunchDaemon(spec);
  if (!launched.ok()) {
    // Nothing of a failed attach stays: its state, and a superblock it
    // wrote before it died (a device that held none before).
    std::error_code ec;
    std::filesystem::remove_all(dirs.StateDir(name), ec);
    if (held_before.ok() && !held_before.value()) ReleaseCacheDevice(spec.cache);
    return Fail(ExitCodeOf(launched), "attach: " + launched.message());
  }
  CacheConfig config{{"origin", spec.origin}, {"cache", spec.cache},
                     {"line_size", std::to_string(spec.engine.line_size)}, {"nbd_tcp", tcp}, {"group", group},
                     {"nbd_connections", std::to_string(spec.nbd_connections)},
                     {"nbd_tcp_insecure", spec.tcp_insecure ? "1" : "0"},
                     {"nbd_tls_psk", spec.tls_psk}, {"nbd_tls_cert", spec.tls_cert},
                     {"metrics_listen", spec.metrics_listen},
                     {"frontend", frontend}, {"online_volume", spec.online_volume},
                     {"online_table", spec.online_table}, {"key_file", spec.key.file},
                     {"key_keyring", spec.key.keyring}};
  Status saved = SaveConfig(dirs.ConfigFile(name), config);
  if (!saved.ok()) return Fail(kExitFailed, "attach: " + saved.message());
  std::printf("attached %s: %s cached on %s, %s, %s lines%s\n", name.c_str(), spec.origin.c_str(),
              spec.cache.c_str(), CacheModeName(mode.value()), line_text.c_str(),
              spec.key.empty() ? "" : (", encrypted (AES-256-XTS; " + spec.key.Describe() + ")").c_str());
  PrintServing(dirs, name, CurrentStats(dirs, name));
  return 0;
}

int StartOne(const Dirs& dirs, const std::string& name, const std::string& frontend_override) {
  Result<CacheConfig> config = LoadConfig(dirs.ConfigFile(name));
  if (!config.ok()) return Fail(kExitNotFound, "start: no cache named '" + name + "'");
  Result<DaemonSpec> from_config = SpecFromConfig(dirs, name, config.value());
  if (!from_config.ok()) return Fail(kExitRefused, "start " + name + ": " + from_config.status().message());
  DaemonSpec& spec = from_config.value();
  if (!frontend_override.empty()) spec.frontend = frontend_override;
  std::vector<std::string> notices;
  Status s = LaunchDaemon(spec, &notices);
  for (const std::string& notice : notices) std::fprintf(stderr, "cachectl: %s\n", notice.c_str());
  if (!s.ok()) {
    Result<DamageReport> damage = AssessNamedCache(dirs, name, config.value());
    if (!damage.ok() || !damage->damaged()) return Fail(ExitCodeOf(s), "start " + name + ": " + s.message());
    if (damage->released_with_nothing_dirty()) {
      return Fail(kExitRefused, "start " + name + ": " + spec.cache + " was released by a detach that "
                  "did not finish (or its superblock was overwritten); the origin holds all the data: "
                  "run 'cachectl detach " + name + "' to finish it");
    }
    return Fail(kExitRefused, "start " + name + ": " + s.message() + "; the cache is damaged and " +
                DescribeDirty(damage.value()) + ": see 'cachectl check " + name + "'");
  }
  StatsReply stats = CurrentStats(dirs, name);
  std::printf("started %s (%s, warm from %s)\n", name.c_str(), stats.Value("mode").c_str(),
              stats.Value("started_from") == "snapshot" ? "its snapshot" : "saved metadata");
  PrintServing(dirs, name, stats);
  RestoreExport(dirs, name);
  return 0;
}

int Start(const std::vector<std::string>& args) {
  std::string name, frontend;
  CommonOptions common;
  po::options_description desc = common.Describe(
      "cachectl start NAME | --all [--frontend auto|ublk|nbd|socket]\n\nexample: cachectl start data");
  desc.add_options()("name", po::value(&name), "cache to start")("all", "start every cache that is not running")
      ("frontend", po::value(&frontend), "override the front end chosen at attach");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "start", "name"); rc >= 0) return rc;
  if (!frontend.empty() && !CheckFrontend(frontend).ok()) return Fail(kExitUsage, "start: " + CheckFrontend(frontend).message());
  if (int rc = common.RequireRoot("start"); rc != 0) return rc;
  Dirs dirs = common.dirs();
  if (!vm.count("all")) {
    if (name.empty()) return Fail(kExitUsage, "start: give a cache name or --all");
    return StartOne(dirs, name, frontend);
  }
  int worst = 0;
  for (const std::string& n : ListCaches(dirs)) {
    if (access(dirs.ControlSocket(n).c_str(), F_OK) == 0 &&
        SendControl(dirs.ControlSocket(n), StatsRequest{}).ok()) {
      continue;  // running already
    }
    worst = std::max(worst, StartOne(dirs, n, frontend));
  }
  return worst;
}

}  // namespace

// Progress: a bar on a terminal, a line per tenth otherwise.
std::function<void(uint64_t, uint64_t)> ProgressPrinter(const std::string& what) {
  bool tty = isatty(STDOUT_FILENO);
  auto last = std::make_shared<int>(-1);
  return [tty, last, what](uint64_t left, uint64_t total) {
    int pct = total == 0 ? 100 : static_cast<int>(100 * (total - left) / total);
    if (tty) {
      std::string bar(pct / 5, '#');
      bar.resize(20, '.');
      std::printf("\r%s [%s] %3d%% %llu dirty lines left ", what.c_str(), bar.c_str(), pct,
                  (unsigned long long)left);
    } else if (pct / 10 != *last / 10 || left == 0) {
      std::printf("%s: %d%%, %llu dirty lines left\n", what.c_str(), pct, (unsigned long long)left);
    }
    *last = pct;
    std::fflush(stdout);
  };
}

namespace {

// stop, detach, flush: NAME and a control request.
int SimpleControl(const std::vector<std::string>& args, const char* verb, const char* usage,
                  Request request, const char* done) {
  std::string name;
  CommonOptions common;
  po::options_description desc = common.Describe(usage);
  desc.add_options()("name", po::value(&name)->required(), "cache name");
  auto* detach = std::get_if<DetachRequest>(&request);
  if (detach) {
    desc.add_options()("wipe", "then discard the whole cache device and zero what still reads as data");
  }
  const bool releases = detach || std::holds_alternative<StopRequest>(request);
  if (releases) {
    desc.add_options()("force", detach ? "unexport first when the cache is exported over NVMe/TCP"
                                       : "take an NVMe/TCP export down first (the next start serves it again)");
  }
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, verb, "name"); rc >= 0) return rc;
  const bool wipe = vm.count("wipe") > 0;
  if (detach) detach->wipe = wipe;
  if (int rc = common.RequireRoot(verb); rc != 0) return rc;
  Dirs dirs = common.dirs();
  if (access(dirs.ConfigFile(name).c_str(), F_OK) != 0) {
    return Fail(kExitNotFound, std::string(verb) + ": no cache named '" + name + "'");
  }
  // Hosts using the export would lose the volume under them.
  if (releases) {
    if (int rc = ReleaseExport(dirs, name, verb, vm.count("force") > 0, detach != nullptr); rc != 0) return rc;
  }
  bool running = SendControl(dirs.ControlSocket(name), StatsRequest{}).ok();
  if (!running && detach) {
    // A stopped cache is detached all the same: started (to clean what is
    // dirty), then detached; or, when an interrupted detach had already
    // released the cache device and nothing is dirty, only its state is
    // left to remove.
    Result<CacheConfig> config = LoadConfig(dirs.ConfigFile(name));
    Result<DamageReport> damage = config.ok() ? AssessNamedCache(dirs, name, config.value())
                                              : Result<DamageReport>(config.status());
    if (damage.ok() && damage->released_with_nothing_dirty()) {
      if (wipe) {
        auto device = OpenFileDevice(config.value()["cache"]);
        Result<WipeReport> wiped = device.ok() ? WipeDevice(device->get()) : Result<WipeReport>(device.status());
        if (!wiped.ok()) return Fail(kExitFailed, "detach: wiping " + config.value()["cache"] + ": " +
                                     wiped.status().message());
      }
      std::error_code ec;
      std::filesystem::remove_all(dirs.StateDir(name), ec);
      std::printf("%s %s (finished an interrupted detach)\n", done, name.c_str());
      return 0;
    }
    if (int rc = StartOne(dirs, name, ""); rc != 0) return rc;
  }
  auto reply = SendControl(dirs.ControlSocket(name), request, ProgressPrinter(verb));
  if (isatty(STDOUT_FILENO)) std::printf("\n");
  if (!reply.ok() && running && !std::holds_alternative<StopRequest>(request)) {
    return Fail(kExitFailed, std::string(verb) + ": the daemon of '" + name + "' died during the " +
                verb + " (see " + dirs.LogFile(name) + "); 'cachectl start " + name +
                "' brings the cache back, no flushed data lost");
  }
  if (!reply.ok()) {
    return Fail(kExitNotFound, std::string(verb) + ": cache '" + name + "' is not running (" +
                                   reply.status().message() + ")");
  }
  if (reply->exit_code != 0) return Fail(reply->exit_code, std::string(verb) + ": " + reply->message);
  if (detach) {
    std::error_code ec;
    std::filesystem::remove_all(dirs.StateDir(name), ec);
  }
  std::printf("%s %s\n", done, name.c_str());
  return 0;
}

}  // namespace

int RunAttach(const std::vector<std::string>& a) { return Attach(a); }
int RunStart(const std::vector<std::string>& a) { return Start(a); }
int RunStop(const std::vector<std::string>& a) {
  return SimpleControl(a, "stop", "cachectl stop NAME\n\nStops serving; the cache stays warm on the SSD "
                       "(dirty data included) for 'cachectl start'.\n\nexample: cachectl stop data",
                       StopRequest{}, "stopped");
}
int RunDetach(const std::vector<std::string>& a) {
  return SimpleControl(a, "detach", "cachectl detach NAME [--wipe]\n\nFlushes, then releases the cache: the "
                       "origin alone holds the data. With --wipe, nothing of the volume's data stays\n"
                       "readable on the cache device either (before reusing or retiring it).\n\n"
                       "example: cachectl detach data --wipe",
                       DetachRequest{}, "detached; the origin alone holds the data:");
}
int RunFlush(const std::vector<std::string>& a) {
  return SimpleControl(a, "flush", "cachectl flush NAME\n\nWrites every dirty line to the origin now."
                       "\n\nexample: cachectl flush data", FlushRequest{}, "flushed");
}

namespace {

// The text of set's flags; the cleaner's numbers are what the option
// parser made of them.
struct SetFlags {
  std::string volume, mode, cutoff, window, rate, ram;
  std::optional<uint32_t> target, high, low, batch;
};

// One request of every flag given; kInvalidArgument saying which is wrong.
Result<SetRequest> ToSetRequest(const SetFlags& f) {
  SetRequest r;
  r.dirty_target_pct = f.target;
  r.dirty_high_pct = f.high;
  r.dirty_low_pct = f.low;
  r.cleaner_batch_lines = f.batch;
  if (f.window == "off") {
    r.placement_window.emplace();  // given: no window
  } else if (!f.window.empty()) {
    Result<PlacementWindow> w = ParsePlacementWindow(f.window);
    if (!w.ok()) return w.status();
    r.placement_window.emplace(w.value());
  }
  if (!f.rate.empty()) {
    Result<uint64_t> rate = ParseSize(f.rate);
    if (!rate.ok() || rate.value() == 0) {
      return Status::InvalidArgument("--placement-rate '" + f.rate + "': a size a second above 0, e.g. 64M");
    }
    r.placement_rate_bytes = rate.value();
  }
  if (!f.mode.empty()) {
    Result<CacheMode> mode = ParseCacheMode(f.mode);
    if (!mode.ok()) return mode.status();
    r.mode = mode.value();
  }
  if (!f.ram.empty()) {
    Result<uint64_t> ram = ParseRamCache(f.ram);
    if (!ram.ok()) return ram.status();
    r.ram_cache_bytes = ram.value();
  }
  r.volume = f.volume;
  if (f.cutoff == "cache") {
    r.seq_cutoff_of_cache = true;
  } else if (!f.cutoff.empty()) {
    Result<uint64_t> cutoff = ParseSize(f.cutoff);
    if (!cutoff.ok()) return Status::InvalidArgument("--seq-cutoff: " + cutoff.status().message());
    r.seq_cutoff_bytes = cutoff.value();
  }
  if (!r.volume.empty()) CACHECORE_RETURN_IF_ERROR(CheckName(r.volume));
  CACHECORE_RETURN_IF_ERROR(CheckVolumeSet(r));
  return r;
}

}  // namespace

// One request: the daemon applies the fields given over the settings in
// force, so a `set` at the same time from elsewhere is never undone.
int RunSet(const std::vector<std::string>& args) {
  std::string name;
  SetFlags f;
  CommonOptions common;
  po::options_description desc = common.Describe(
      "cachectl set NAME [--mode MODE] [--seq-cutoff SIZE] [--dirty-target PCT] [--dirty-high PCT]\n"
      "                  [--dirty-low PCT] [--cleaner-batch LINES] [--placement-window HH:MM-HH:MM|off] "
      "[--placement-rate SIZE]\n"
      "                  [--ram-cache SIZE|off]\n"
      "cachectl set NAME --volume VOLUME --seq-cutoff SIZE|cache\n\nexample: cachectl set data --mode writethrough\n"
      "example: cachectl set data --placement-window 01:00-05:00 --placement-rate 32M\n"
      "example: cachectl set data --ram-cache 2G\n"
      "example: cachectl set data --volume backup --seq-cutoff 256K");
  desc.add_options()
      ("name", po::value(&name)->required(), "cache name")
      ("mode", po::value(&f.mode), "new mode; leaving writeback flushes first, with progress")
      ("seq-cutoff", po::value(&f.cutoff), "sequential cutoff (0: off); with --volume also 'cache': the cache's")
      ("volume", po::value(&f.volume), "set this volume's own sequential cutoff (the other settings are the cache's)")
      ("placement-window", po::value(&f.window),
       "daily local time when the hottest data of the last day is moved in and cold data out (off: never)")
      ("placement-rate", po::value(&f.rate), "bytes a second placement and pin filling may move (e.g. 64M)")
      ("ram-cache", po::value(&f.ram), "the RAM tier above the SSD: a read cache of the hottest blocks in this "
       "much memory, at least 4M (off: none); it starts empty");
  AddCleanerOptions(desc);
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "set", "name"); rc >= 0) return rc;
  TakeCleanerOptions(vm, f.target, f.high, f.low, f.batch);
  Result<SetRequest> request = ToSetRequest(f);
  if (request.ok() && request->empty()) {
    return Fail(kExitUsage, "set: nothing to set (--mode, --seq-cutoff, --dirty-target, --dirty-high, --dirty-low, --cleaner-batch, "
                            "--placement-window, --placement-rate, --ram-cache)");
  }
  if (!request.ok()) return Fail(kExitUsage, "set: " + request.status().message());
  if (int rc = common.RequireRoot("set"); rc != 0) return rc;
  ControlReply reply;
  if (int rc = AskCache(common.dirs(), name, "set", request.value(), &reply, ProgressPrinter("set")); rc != 0) {
    return rc;
  }
  std::printf("set %s\n", name.c_str());
  return 0;
}

}  // namespace cachectl
