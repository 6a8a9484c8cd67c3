// Where a cache's files live, and its saved configuration.
//   run dir   (default /run/cachectl, --run-dir, $CACHECTL_RUN_DIR):
//             NAME/control (0600), NAME/nbd, NAME/pid
//   state dir (default /var/lib/cachectl, --state-dir, $CACHECTL_STATE_DIR):
//             NAME/metadata (RocksDB), NAME/cache.conf, NAME/daemon.log
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cachecore/base/status.h"

namespace cachectl {

struct Dirs {
  std::string run;
  std::string state;
  std::string RunDir(const std::string& name) const { return run + "/" + name; }
  std::string StateDir(const std::string& name) const { return state + "/" + name; }
  std::string ControlSocket(const std::string& name) const { return RunDir(name) + "/control"; }
  std::string NbdSocket(const std::string& name) const { return RunDir(name) + "/nbd"; }
  std::string Metadata(const std::string& name) const { return StateDir(name) + "/metadata"; }
  std::string ConfigFile(const std::string& name) const { return StateDir(name) + "/cache.conf"; }
  // The cache's added volumes: VOLUME=ORIGIN lines (docs/design.md, "Volumes").
  std::string VolumesFile(const std::string& name) const { return StateDir(name) + "/volumes.conf"; }
  std::string LogFile(const std::string& name) const { return StateDir(name) + "/daemon.log"; }
};

// Flags win over the environment, which wins over the defaults.
Dirs ResolveDirs(const std::string& run_flag, const std::string& state_flag);

// Names are 1-64 characters of letters, digits, '.', '_' and '-', not
// starting with '.'.
cachecore::Status CheckName(const std::string& name);
// A name from a device path: its last component, cleaned up.
std::string NameFromPath(const std::string& path);

// The saved configuration of a cache: key=value lines.
using CacheConfig = std::map<std::string, std::string>;
cachecore::Status SaveConfig(const std::string& path, const CacheConfig& config);
cachecore::Result<CacheConfig> LoadConfig(const std::string& path);

// Names of the caches with a state directory, sorted.
std::vector<std::string> ListCaches(const Dirs& dirs);

// mkdir -p with the given mode for what it creates.
cachecore::Status MakeDirs(const std::string& path, unsigned mode);

}  // namespace cachectl
