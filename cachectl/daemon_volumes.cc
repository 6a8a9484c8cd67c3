#include "daemon_volumes.h"

#include "cachecore/devices/open_device.h"

namespace cachectl {

using cachecore::EngineDevices;
using cachecore::FlushProgress;
using cachecore::Result;
using cachecore::VolumeInfo;

namespace {

Status SaveVolumes(Daemon& d) {
  CacheConfig listed;
  for (const auto& [name, v] : d.added_volumes) listed[name] = v.origin_path;
  return SaveConfig(d.spec.dirs.VolumesFile(d.spec.name), listed);
}

// Serves `volume` as an NBD export of its name.
Status Export(Daemon& d, Engine& engine, const std::string& volume, Daemon::AddedVolume& v) {
  Result<VolumeInfo> info = engine.volume(volume);
  if (!info.ok()) return info.status();
  v.backend = std::make_unique<shim::EngineBackend>(&engine, info->base, info->size);
  Status s = d.nbd->AddExport(volume, v.backend.get());
  if (!s.ok()) v.backend.reset();
  return s;
}

}  // namespace

Status OpenAddedVolumes(Daemon& d, EngineDevices& devices) {
  devices.origin_name = d.spec.name;
  Result<CacheConfig> listed = LoadConfig(d.spec.dirs.VolumesFile(d.spec.name));
  if (!listed.ok()) return Status::Ok();  // none added
  std::lock_guard lock(d.volumes_mu);
  for (const auto& [name, path] : listed.value()) {
    auto origin = cachecore::OpenOriginDevice(path);
    if (!origin.ok()) {
      // Left out: if the engine has the volume, Engine::Open refuses for
      // want of its origin, naming it; if not (an add a crash cut short),
      // it is forgotten below.
      Log("warning", "volume " + name + ": " + origin.status().message());
      d.added_volumes[name] = {path, nullptr, nullptr};
      continue;
    }
    d.added_volumes[name] = {path, std::move(origin.value()), nullptr};
  }
  if (d.added_volumes.empty()) return Status::Ok();
  devices.volumes.push_back({d.spec.name, devices.origin});
  for (auto& [name, v] : d.added_volumes) {
    if (v.origin) devices.volumes.push_back({name, v.origin.get()});
  }
  return Status::Ok();
}

Status ServeAddedVolumes(Daemon& d) {
  std::lock_guard lock(d.volumes_mu);
  bool changed = false;
  for (auto it = d.added_volumes.begin(); it != d.added_volumes.end();) {
    Result<VolumeInfo> info = d.engine->volume(it->first);
    if (!info.ok()) {  // never added, or its removal finished: nothing of it is cached
      Log("info", "volume " + it->first + " is not in the cache (an add or remove cut short); forgotten");
      it = d.added_volumes.erase(it);
      changed = true;
      continue;
    }
    if (info->removing) {
      d.notices.push_back("volume " + it->first + " was being removed and is not served: run 'cachectl remove " +
                          d.spec.name + " --volume " + it->first + "' to finish");
    } else {
      CACHECORE_RETURN_IF_ERROR(Export(d, *d.engine, it->first, it->second));
    }
    ++it;
  }
  return changed ? SaveVolumes(d) : Status::Ok();
}

Status AddVolume(Daemon& d, Engine& engine, const std::string& volume, const std::string& origin) {
  std::lock_guard lock(d.volumes_mu);
  if (volume == d.spec.name || d.added_volumes.count(volume) > 0) {
    return Status::Busy("cache " + d.spec.name + " has a volume named " + volume + " already");
  }
  auto device = cachecore::OpenOriginDevice(origin);
  if (!device.ok()) return device.status();
  // Listed first: a crash once the engine has the volume must find its
  // origin at the next start (one it does not have is forgotten then).
  auto& added = d.added_volumes[volume];
  added = {origin, std::move(device.value()), nullptr};
  Status s = SaveVolumes(d);
  Result<VolumeInfo> info = s.ok() ? engine.AddVolume(volume, added.origin.get()) : Result<VolumeInfo>(s);
  if (!info.ok()) {
    if (!engine.volume(volume).ok()) {
      d.added_volumes.erase(volume);
      (void)SaveVolumes(d);
    }
    return info.status();
  }
  if (Status served = Export(d, engine, volume, added); !served.ok()) {
    return Status::IoError("volume " + volume + " was added but is not served (" + served.message() +
                           "); 'cachectl remove " + d.spec.name + " --volume " + volume + "' takes it off");
  }
  Log("info", "volume " + volume + " added: " + origin + ", " + std::to_string(info->size) + " bytes");
  return Status::Ok();
}

Status RemoveVolume(Daemon& d, Engine& engine, const std::string& volume, const FlushProgress& progress) {
  std::lock_guard lock(d.volumes_mu);
  if (volume == d.spec.name) {
    return Status::Busy("volume " + volume + " is the cache's own (its device is /dev/mapper/" + volume +
                        "): remove the others, then detach the cache");
  }
  auto it = d.added_volumes.find(volume);
  if (it == d.added_volumes.end()) return Status::NotFound("cache " + d.spec.name + " has no volume " + volume);
  // Its clients first: their requests are answered before the engine
  // stops taking the volume's.
  if (it->second.backend) CACHECORE_RETURN_IF_ERROR(d.nbd->RemoveExport(volume));
  it->second.backend.reset();
  Log("info", "removing volume " + volume + ": cleaning its dirty data");
  CACHECORE_RETURN_IF_ERROR(engine.RemoveVolume(volume, progress));
  d.added_volumes.erase(it);
  Log("info", "volume " + volume + " removed: its origin holds all its data");
  return SaveVolumes(d);
}

}  // namespace cachectl
