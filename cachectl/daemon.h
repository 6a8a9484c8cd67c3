// The cache daemon: one process per cache. It owns the devices, the
// metadata store and the engine, serves the cached volume over NBD and
// answers the control socket. Started by `cachectl attach` and `start`.
#pragma once

#include <string>

#include "cachecore/engine.h"
#include "paths.h"

namespace cachectl {

struct DaemonSpec {
  std::string name;
  Dirs dirs;
  std::string origin;
  std::string cache;
  bool create = false;   // attach: format the cache; start: open it warm
  bool force = false;
  cachecore::EngineConfig engine;
  std::string tcp_address;  // NBD over TCP only when given
};

// Forks the daemon and waits until it serves (OK) or has failed; the
// failure comes back as the daemon saw it, before anything was served.
cachecore::Status LaunchDaemon(const DaemonSpec& spec);

}  // namespace cachectl
