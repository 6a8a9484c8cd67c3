// The running daemon's state, shared by daemon.cc (its life and control
// commands) and kernel_frontend.cc (the kernel block device over it).
// Internal to the cachectl executable.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "cachecore/devices/block_device.h"
#include "cachecore/engine/engine.h"
#include "cachecore/metadata/metadata_store.h"
#include "daemon.h"
#include "history.h"
#include "kernel_frontend.h"
#include "metrics_server.h"
#include "shim/engine_backend.h"
#include "shim/kernel_device.h"
#include "shim/nbd_server.h"

namespace cachectl {

using cachecore::BlockDevice;
using cachecore::Engine;
using cachecore::MetadataStore;
using cachecore::Status;

// One line in the daemon's log (its stderr, STATE/NAME/daemon.log), stamped.
void Log(const char* level, const std::string& msg);

// The running daemon's parts, and how it is asked to stop.
struct Daemon {
  DaemonSpec spec;
  std::unique_ptr<BlockDevice> origin, cache;
  std::unique_ptr<MetadataStore> store;
  std::shared_mutex engine_mu;  // guards `engine` going away at shutdown
  std::unique_ptr<Engine> engine;
  std::unique_ptr<shim::EngineBackend> backend;
  // The volumes added to the cache (cachectl add), by name: each one's
  // origin and the NBD export that serves it. The cache's first volume
  // (named as the cache) is `origin` and `backend`.
  struct AddedVolume {
    ListedVolume listed;  // as volumes.conf lists it
    std::unique_ptr<BlockDevice> origin;
    std::unique_ptr<shim::EngineBackend> backend;  // its NBD export's (null until served)
    KernelFrontEnd front;                          // /dev/mapper/VOLUME, or the online volume
  };
  std::mutex volumes_mu;  // one add or remove at a time; guards added_volumes and stopping
  std::map<std::string, AddedVolume> added_volumes;
  bool stopping = false;  // the front ends are stopped for good: no add or remove
  std::unique_ptr<shim::NbdServer> nbd;
  std::unique_ptr<MetricsServer> metrics;  // /metrics, with attach --listen
  History history;                         // a minute a row, for stats --history
  KernelFrontEnd front;  // the first volume's kernel device and /dev/mapper/NAME
  // What stats shows of the front ends, copied by PublishFrontEnd whenever
  // one changes: stats reads these from any thread (a control request, a
  // scrape, the history) while a stop takes a kernel device away.
  struct ShownFrontEnd {
    std::string kernel_device, dm_device, frontend;
  };
  std::mutex shown_mu;
  ShownFrontEnd shown;                                   // under shown_mu: the first volume's
  std::map<std::string, ShownFrontEnd> shown_volumes;  // under shown_mu: each added volume's
  // Counters a `stats --reset` zeroed, added up: the history, the error
  // watch and /metrics count from the daemon's start.
  std::mutex counters_mu;
  std::map<std::string, uint64_t> reset_base;  // under counters_mu
  std::vector<std::string> notices;         // for the user of 'start' (a repair made on the way)
  int control_fd = -1;
  std::atomic<int> control_connections{0};  // open now, at most kMaxControlConnections

  // Serializes `set` requests (daemon_control.cc): each applies its fields
  // over the settings in force, so two at once never undo each other.
  std::mutex settings_mu;
  // Held by a `set` with a mode for all of it (the switch may clean
  // first), so that such sets run whole, one after another. Taken before
  // settings_mu.
  std::mutex mode_mu;

  std::mutex mu;
  std::condition_variable cv;
  bool stop_requested = false;
  bool detach = false;
  bool wipe = false;  // detach --wipe: no copy of the volume's data stays on the cache device
  bool stopped = false;
  Status stop_status;
};

// Copies the front ends' state for stats (shown*): by the thread that
// changed one, after each change.
void PublishFrontEnd(Daemon& d);
// Where a volume's kernel front end keeps its state files: STATE/NAME/ for
// the cache's first volume, STATE/NAME/volume-VOLUME. for an added one.
std::string VolumeStatePrefix(const Daemon& d, const std::string& volume);
// The kernel front end of an added volume, or of the first when `volume`
// is the cache's name, as StartKernelFrontEnd needs it: the kernel device
// the cache's front end chose (none when it serves the socket alone).
KernelFrontEnd FrontEndFor(const Daemon& d, const std::string& volume, shim::BlockBackend* backend, uint64_t size,
                           const std::string& online_volume, const std::string& online_table);
// Stops every volume's kernel front end (added volumes first; online ones
// are flushed and given their own tables back); kBusy, nothing changed,
// while any /dev/mapper device of the cache is open. Once it succeeds no
// add or remove runs.
Status StopFrontEnds(Daemon& d);
// A daemon that failed to start, about to exit: the kernel devices it could
// not stop are left connected (not deleted under their users) for the next
// daemon to take back.
void AbandonFrontEnds(Daemon& d);

// Stops serving (the kernel device first: refused while it is mounted, and
// the cache then keeps serving) and waits until the daemon has shut the
// engine down; with `detach`, releases the cache (and `wipe`s its device).
// Returns how the shutdown went. Called from a control request's thread.
Status StopDaemon(Daemon& d, bool detach, bool wipe);

}  // namespace cachectl
