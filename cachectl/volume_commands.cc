// cachectl add / remove: more origins on one cache, each served on its own
// (its NBD export, nbd+unix:///VOLUME?socket=...), and one taken off again
// with its dirty data on its origin first (docs/usage.md, "Several volumes
// on one cache").
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>

#include "cache_checks.h"
#include "cachecore/devices/nbd_device.h"  // IsNbdUri
#include "cli_common.h"
#include "commands.h"
#include "stats_view.h"

namespace cachectl {

namespace po = boost::program_options;
using cachecore::Result;
using cachecore::Status;

namespace {

// NAME's saved configuration: kExitNotFound printed when there is none.
int LoadCache(const Dirs& dirs, const std::string& verb, const std::string& name, CacheConfig* config) {
  Result<CacheConfig> c = LoadConfig(dirs.ConfigFile(name));
  if (!c.ok()) return Fail(kExitNotFound, verb + ": no cache named '" + name + "'");
  *config = c.value();
  return 0;
}

// Sends add or remove to NAME's daemon; a daemon that dies on the way (a
// crash) is told apart from one that was not running.
int AskVolumeChange(const Dirs& dirs, const std::string& verb, const std::string& name, const Request& request,
                    const ProgressSink& progress = {}) {
  const bool running = SendControl(dirs.ControlSocket(name), StatsRequest{}).ok();
  if (!running) return Fail(kExitNotFound, verb + ": cache '" + name + "' is not running");
  Result<ControlReply> reply = SendControl(dirs.ControlSocket(name), request, progress);
  if (isatty(STDOUT_FILENO) && progress) std::printf("\n");
  if (!reply.ok()) {
    return Fail(kExitFailed, verb + ": the daemon of '" + name + "' died during the " + verb + " (see " +
                                 dirs.LogFile(name) + "); 'cachectl start " + name +
                                 "' brings the cache back, no flushed data lost");
  }
  if (reply->exit_code != 0) return Fail(reply->exit_code, verb + ": " + reply->message);
  return 0;
}

}  // namespace

int RunAdd(const std::vector<std::string>& args) {
  std::string name, origin, volume;
  CommonOptions common;
  po::options_description desc = common.Describe(
      "cachectl add NAME --origin DEV --volume VOLUME\n\n"
      "Adds DEV to the running cache NAME as volume VOLUME: it shares the cache's SSD\n"
      "with the cache's other volumes and is served at once as the NBD export VOLUME\n"
      "on the cache's socket and, where the cache has a kernel device, as\n"
      "/dev/mapper/VOLUME. A device-mapper volume in use is cached online: it keeps\n"
      "its name and users. Any other DEV must not be in use.\n\n"
      "example: cachectl add data --origin /dev/vg0/logs --volume logs");
  desc.add_options()("name", po::value(&name)->required(), "cache name")(
      "origin", po::value(&origin)->required(), "the volume's origin: a block device, a file or an NBD URI")(
      "volume", po::value(&volume)->required(), "the volume's name (as cache names: letters, digits, . _ -)");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "add", "name"); rc >= 0) return rc;
  if (Status s = CheckName(volume); !s.ok()) return Fail(kExitUsage, "add: --volume: " + s.message());
  if (std::any_of(origin.begin(), origin.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
    return Fail(kExitUsage, "add: --origin: the name holds a control character");
  }
  if (int rc = common.RequireRoot("add"); rc != 0) return rc;
  const Dirs dirs = common.dirs();
  CacheConfig config;
  if (int rc = LoadCache(dirs, "add", name, &config); rc != 0) return rc;
  std::error_code ec;
  const std::string path = cachecore::IsNbdUri(origin) ? origin : std::filesystem::absolute(origin, ec).string();
  // A cachectl export as an origin would cache a cache, and its cache
  // would have to be running before this one could start.
  if (cachecore::IsNbdUri(path) && path.find("socket=" + dirs.run + "/") != std::string::npos) {
    return Fail(kExitUsage, "add: " + path + " is a cachectl cache's own export; add the volume under it instead");
  }
  if (Status s = CheckDevices(dirs, path, config["cache"], name); !s.ok()) {
    return Fail(ExitCodeOf(s), "add: " + s.message());
  }
  if (int rc = AskVolumeChange(dirs, "add", name, AddVolumeRequest{volume, path}); rc != 0) return rc;
  std::printf("added %s to cache %s as volume %s\n", path.c_str(), name.c_str(), volume.c_str());
  Result<Fields> view = VolumeView(CurrentStats(dirs, name).fields, name, volume);
  const std::string dm = view.ok() ? FieldView(view.value()).Text("dm_device") : "";
  if (!dm.empty()) {
    std::printf("  block device: %s (over %s)\n", dm.c_str(), FieldView(view.value()).Text("kernel_device").c_str());
  }
  std::printf("  NBD export: nbd+unix:///%s?socket=%s\n", volume.c_str(), dirs.NbdSocket(name).c_str());
  return 0;
}

int RunRemove(const std::vector<std::string>& args) {
  std::string name, volume;
  CommonOptions common;
  po::options_description desc = common.Describe(
      "cachectl remove NAME --volume VOLUME\n\n"
      "Takes volume VOLUME's kernel device away (refused while /dev/mapper/VOLUME is\n"
      "open; an online volume gets its own table back), ends its NBD clients, writes\n"
      "its dirty data to its origin, and takes it off the cache NAME; the cache's\n"
      "other volumes go on meanwhile.\n\n"
      "example: cachectl remove data --volume logs");
  desc.add_options()("name", po::value(&name)->required(), "cache name")(
      "volume", po::value(&volume)->required(), "the volume to take off");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "remove", "name"); rc >= 0) return rc;
  if (Status s = CheckName(volume); !s.ok()) return Fail(kExitUsage, "remove: --volume: " + s.message());
  if (int rc = common.RequireRoot("remove"); rc != 0) return rc;
  const Dirs dirs = common.dirs();
  CacheConfig config;
  if (int rc = LoadCache(dirs, "remove", name, &config); rc != 0) return rc;
  if (int rc = AskVolumeChange(dirs, "remove", name, RemoveVolumeRequest{volume}, ProgressPrinter("remove")); rc != 0) {
    return rc;
  }
  std::printf("removed volume %s from cache %s; its origin holds all its data\n", volume.c_str(), name.c_str());
  return 0;
}

}  // namespace cachectl
