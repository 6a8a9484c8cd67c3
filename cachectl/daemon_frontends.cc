// The kernel front ends of all of a daemon's volumes: how each is set up,
// what stats shows of them, and how they stop together.
#include "cachecore/metadata/superblock.h"  // UuidToString
#include "daemon_state.h"

namespace cachectl {

using cachecore::Status;

namespace {

Daemon::ShownFrontEnd ShownOf(const KernelFrontEnd& f) { return {f.kernel_device(), f.dm_device(), f.note}; }

}  // namespace

void PublishFrontEnd(Daemon& d) {
  std::map<std::string, Daemon::ShownFrontEnd> volumes;
  for (const auto& [name, v] : d.added_volumes) volumes[name] = ShownOf(v.front);
  Daemon::ShownFrontEnd first = ShownOf(d.front);
  std::lock_guard lock(d.shown_mu);
  d.shown = std::move(first);
  d.shown_volumes = std::move(volumes);
}

std::string VolumeStatePrefix(const Daemon& d, const std::string& volume) {
  return d.spec.dirs.StateDir(d.spec.name) + (volume == d.spec.name ? "/" : "/volume-" + volume + ".");
}

KernelFrontEnd FrontEndFor(const Daemon& d, const std::string& volume, shim::BlockBackend* backend, uint64_t size,
                           const std::string& online_volume, const std::string& online_table) {
  const bool first = volume == d.spec.name;
  KernelFrontEnd f;
  f.cache_name = d.spec.name;
  f.dm_name = volume;
  f.online_volume = online_volume;
  f.online_table = online_table;
  f.state_prefix = VolumeStatePrefix(d, volume);
  // What the kernel's NBD driver shows, and must be given again to hand a
  // device over: a volume's is its cache's and its own name.
  f.backend_id = "cachectl:" + d.spec.name + ":" + cachecore::UuidToString(d.engine->identity().uuid) +
                 (first ? "" : ":" + volume);
  f.export_name = first ? "" : volume;
  // Where the cache's own volume is served on the socket alone (auto,
  // and the kernel has neither ublk nor NBD), so are the others.
  f.frontend = !first && d.front.note == "socket" ? "socket" : d.spec.frontend;
  f.backend = backend;
  f.nbd = d.nbd.get();
  f.size = size;
  Engine* engine = d.engine.get();
  f.evict = [engine, volume] { return engine->EvictVolume(volume); };
  return f;
}

void AbandonFrontEnds(Daemon& d) {
  // Destroying a kernel device deletes it; these must outlive the process
  // for the next daemon to take back (it exits next).
  (void)d.front.kernel.release();
  for (auto& [name, v] : d.added_volumes) (void)v.front.kernel.release();
}

Status StopFrontEnds(Daemon& d) {
  std::lock_guard lock(d.volumes_mu);
  CACHECORE_RETURN_IF_ERROR(RefuseWhileOpen(d.front));
  for (auto& [name, v] : d.added_volumes) CACHECORE_RETURN_IF_ERROR(RefuseWhileOpen(v.front));
  d.stopping = true;  // no add or remove from here on
  // An online volume points at its origin again only once the cache holds
  // none of its data dirty.
  for (auto& [name, v] : d.added_volumes) {
    const std::string& volume = name;
    Status s = StopKernelFrontEnd(v.front, [&] { return d.engine->FlushVolume(volume); });
    PublishFrontEnd(d);
    if (!s.ok()) {
      d.stopping = false;  // the cache keeps serving
      return s;
    }
  }
  Status s = StopKernelFrontEnd(d.front, [&] { return d.engine->Flush(); });
  PublishFrontEnd(d);
  if (!s.ok()) d.stopping = false;  // the cache keeps serving
  return s;
}

}  // namespace cachectl
