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
  // The cache's added volumes (LoadListedVolumes; docs/design.md, "Volumes").
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

// A volume added to a cache (cachectl add), as volumes.conf lists it:
// VOLUME=ORIGIN, and for an online volume VOLUME:online=DM-NAME and
// VOLUME:table=ITS-OWN-TABLE (':' is in no volume name).
struct ListedVolume {
  std::string name;
  std::string origin;         // what the engine reads: for an online volume, its hidden device
  std::string online_volume;  // an online volume: the dm device its users keep ("" otherwise)
  std::string online_table;   // and its own table (shim::EncodeTable), given back at remove
};
// A cache's added volumes in name order (none when it has no volumes.conf);
// kCorruption for a file that is not what SaveListedVolumes wrote.
cachecore::Result<std::vector<ListedVolume>> LoadListedVolumes(const Dirs& dirs, const std::string& cache);
cachecore::Status SaveListedVolumes(const Dirs& dirs, const std::string& cache,
                                    const std::vector<ListedVolume>& volumes);
// The device-mapper name of the hidden device that keeps an online
// volume's own table while its users go through the cache: "" for the
// cache's first volume.
std::string HiddenOriginName(const std::string& cache, const std::string& volume = "");

// Names of the caches with a state directory, sorted.
std::vector<std::string> ListCaches(const Dirs& dirs);

// mkdir -p with the given mode for what it creates.
cachecore::Status MakeDirs(const std::string& path, unsigned mode);

}  // namespace cachectl
