// The daemon's side of a cache's added volumes (cachectl add, remove): their
// origins opened at start and named to the engine, their NBD exports, and
// the file that lists them (STATE/NAME/volumes.conf). Internal to the
// cachectl executable.
#pragma once

#include <string>
#include <vector>

#include "daemon_state.h"

namespace cachectl {

// Start: opens every origin volumes.conf lists (kNotFound naming the
// volume whose origin is missing) into d.added_volumes, and lists them for
// Engine::Open with the cache's own (`origin`, named as the cache).
cachecore::Status OpenAddedVolumes(Daemon& d, cachecore::EngineDevices& devices);
// Once the engine is open and the cache's own front end runs: drops from
// volumes.conf what the engine does not have (an add or a removal a crash
// cut short), and serves each volume it has on the NBD server and in the
// kernel (/dev/mapper/VOLUME, or its online volume); a volume whose
// removal did not finish refuses requests (a notice says to run remove
// again).
cachecore::Status ServeAddedVolumes(Daemon& d);
// The control requests. An origin that is a device-mapper volume is
// cached online: it keeps its name and users, and goes through the cache
// until it is removed.
cachecore::Status AddVolume(Daemon& d, Engine& engine, const std::string& volume, const std::string& origin);
cachecore::Status RemoveVolume(Daemon& d, Engine& engine, const std::string& volume,
                               const cachecore::FlushProgress& progress);

}  // namespace cachectl
