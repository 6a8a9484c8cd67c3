#include "daemon_volumes.h"

#include "cachecore/devices/nbd_device.h"  // IsNbdUri
#include "cachecore/devices/open_device.h"
#include "shim/dm_device.h"

namespace cachectl {

using cachecore::EngineDevices;
using cachecore::FlushProgress;
using cachecore::Result;
using cachecore::VolumeInfo;

namespace {

Status SaveVolumes(Daemon& d) {
  std::vector<ListedVolume> listed;
  for (const auto& [name, v] : d.added_volumes) listed.push_back(v.listed);
  return SaveListedVolumes(d.spec.dirs, d.spec.name, listed);
}

// Serves `volume` as an NBD export of its name, and in the kernel as
// /dev/mapper/VOLUME or through its online volume.
Status Serve(Daemon& d, Engine& engine, const std::string& volume, Daemon::AddedVolume& v) {
  Result<VolumeInfo> info = engine.volume(volume);
  if (!info.ok()) return info.status();
  v.backend = std::make_unique<shim::EngineBackend>(&engine, info->base, info->size);
  Status s = d.nbd->AddExport(volume, v.backend.get());
  if (!s.ok()) {
    v.backend.reset();
    return s;
  }
  v.front = FrontEndFor(d, volume, v.backend.get(), info->size, v.listed.online_volume, v.listed.online_table);
  s = StartKernelFrontEnd(v.front);
  PublishFrontEnd(d);
  return s;
}

// An online volume's origin: a hidden device with the volume's own table
// (made again at a start after a reboot).
Status MakeHiddenOrigin(const Daemon& d, const ListedVolume& v) {
  const std::string hidden = HiddenOriginName(d.spec.name, v.name);
  if (v.online_volume.empty() || shim::DeviceExists(hidden)) return Status::Ok();
  Result<shim::DmTable> table = shim::DecodeTable(v.online_table);
  if (!table.ok()) return table.status();
  return shim::CreateDevice(hidden, table.value());
}

// Once its origin is closed: an online volume's hidden device goes.
void DropHiddenOrigin(const Daemon& d, const ListedVolume& v) {
  if (!v.online_volume.empty()) (void)shim::RemoveDevice(HiddenOriginName(d.spec.name, v.name));
}

// A volume the engine no longer has (or never had): its origin closed, its
// state files and hidden device gone, the front ends shown again. The
// caller saves volumes.conf.
std::map<std::string, Daemon::AddedVolume>::iterator Forget(Daemon& d,
                                                            std::map<std::string, Daemon::AddedVolume>::iterator it) {
  const ListedVolume listed = it->second.listed;
  it = d.added_volumes.erase(it);  // closes its origin
  ForgetVolumeState(VolumeStatePrefix(d, listed.name));
  DropHiddenOrigin(d, listed);
  PublishFrontEnd(d);
  return it;
}

// What an added volume is listed as: an online volume (a device-mapper
// volume, in use or not) goes on under its own name, its table kept by a
// hidden device that becomes the origin.
Result<ListedVolume> ListingOf(const Daemon& d, const std::string& volume, const std::string& origin) {
  std::optional<std::string> dm = cachecore::IsNbdUri(origin) ? std::nullopt : shim::DmNameOf(origin);
  if (!dm) {
    if (d.front.note != "socket" && shim::DeviceExists(volume)) {
      return Status::Busy("a device-mapper device named " + volume + " exists already (/dev/mapper/" + volume +
                          " would serve the volume): choose another --volume");
    }
    return ListedVolume{volume, origin, "", ""};
  }
  if (d.front.note == "socket") {
    return Status::InvalidArgument("/dev/mapper/" + *dm + " would be cached online, which needs a kernel front "
                                   "end, and cache " + d.spec.name + " serves the NBD socket alone");
  }
  Result<shim::DmTable> table = shim::GetTable(*dm);
  if (!table.ok()) return table.status();
  const std::string hidden = HiddenOriginName(d.spec.name, volume);
  if (shim::DeviceExists(hidden)) CACHECORE_RETURN_IF_ERROR(shim::RemoveDevice(hidden));  // an add that died
  return ListedVolume{volume, "/dev/mapper/" + hidden, *dm, shim::EncodeTable(table.value())};
}

// Takes an add that failed back off: the volume's front end, export and
// (when the engine has it) its place in the cache, then its listing.
void UndoAdd(Daemon& d, Engine& engine, const std::string& volume) {
  Daemon::AddedVolume& v = d.added_volumes[volume];
  (void)StopKernelFrontEnd(v.front, nullptr);
  if (v.backend) (void)d.nbd->RemoveExport(volume);
  v.backend.reset();
  if (engine.volume(volume).ok() && !engine.RemoveVolume(volume).ok()) return;  // stays listed: remove finishes it
  Forget(d, d.added_volumes.find(volume));
  (void)SaveVolumes(d);
}

}  // namespace

Status OpenAddedVolumes(Daemon& d, EngineDevices& devices) {
  devices.origin_name = d.spec.name;
  Result<std::vector<ListedVolume>> listed = LoadListedVolumes(d.spec.dirs, d.spec.name);
  if (!listed.ok()) return listed.status();
  std::lock_guard lock(d.volumes_mu);
  for (const ListedVolume& v : listed.value()) {
    Status made = MakeHiddenOrigin(d, v);
    auto origin = made.ok() ? cachecore::OpenOriginDevice(v.origin)
                            : Result<std::unique_ptr<BlockDevice>>(made);
    if (!origin.ok()) {
      // Left out: if the engine has the volume, Engine::Open refuses for
      // want of its origin, naming it; if not (an add a crash cut short),
      // it is forgotten below.
      Log("warning", "volume " + v.name + ": " + origin.status().message());
      d.added_volumes[v.name].listed = v;
      continue;
    }
    Daemon::AddedVolume& added = d.added_volumes[v.name];
    added.listed = v;
    added.origin = std::move(origin.value());
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
      it = Forget(d, it);
      changed = true;
      continue;
    }
    if (info->removing) {
      d.notices.push_back("volume " + it->first + " was being removed and refuses requests: run 'cachectl remove " +
                          d.spec.name + " --volume " + it->first + "' to finish");
    }
    // Served even during a removal (the engine refuses the volume's
    // requests): a kernel device a dead daemon left under its dm device
    // is taken back or replaced, and the removal then takes both away. Not
    // an online volume: a removal reaches the engine only once the volume
    // has its own table again, which it keeps (a swap back onto the cache
    // would give its users a device that refuses them).
    if (info->removing && !it->second.listed.online_volume.empty()) {
      ++it;
      continue;
    }
    // One volume that cannot be served does not keep the others from it.
    if (Status served = Serve(d, *d.engine, it->first, it->second); !served.ok()) {
      Log("error", "volume " + it->first + " is not served: " + served.message());
      d.notices.push_back("volume " + it->first + " is not served: " + served.message());
    }
    ++it;
  }
  return changed ? SaveVolumes(d) : Status::Ok();
}

Status AddVolume(Daemon& d, Engine& engine, const std::string& volume, const std::string& origin) {
  std::lock_guard lock(d.volumes_mu);
  if (d.stopping) return Status::Busy("cache " + d.spec.name + " is stopping");
  if (volume == d.spec.name || d.added_volumes.count(volume) > 0) {
    return Status::Busy("cache " + d.spec.name + " has a volume named " + volume + " already");
  }
  Result<ListedVolume> listing = ListingOf(d, volume, origin);
  if (!listing.ok()) return listing.status();
  Status made = MakeHiddenOrigin(d, listing.value());
  if (!made.ok()) return made;
  auto device = cachecore::OpenOriginDevice(listing->origin);
  if (!device.ok()) {
    DropHiddenOrigin(d, listing.value());
    return device.status();
  }
  // Listed first: a crash once the engine has the volume must find its
  // origin at the next start (one it does not have is forgotten then).
  Daemon::AddedVolume& added = d.added_volumes[volume];
  added.listed = listing.value();
  added.origin = std::move(device.value());
  Status s = SaveVolumes(d);
  Result<VolumeInfo> info = s.ok() ? engine.AddVolume(volume, added.origin.get()) : Result<VolumeInfo>(s);
  if (!info.ok()) {
    UndoAdd(d, engine, volume);
    return info.status();
  }
  if (Status served = Serve(d, engine, volume, added); !served.ok()) {
    UndoAdd(d, engine, volume);
    if (d.added_volumes.count(volume) == 0) return served;
    return Status::IoError("volume " + volume + " was added but is not served (" + served.message() +
                           "); 'cachectl remove " + d.spec.name + " --volume " + volume + "' takes it off");
  }
  Log("info", "volume " + volume + " added: " + origin + ", " + std::to_string(info->size) + " bytes" +
                  (added.front.dm_device().empty() ? "" : ", as " + added.front.dm_device()));
  return Status::Ok();
}

Status RemoveVolume(Daemon& d, Engine& engine, const std::string& volume, const FlushProgress& progress) {
  std::lock_guard lock(d.volumes_mu);
  if (d.stopping) return Status::Busy("cache " + d.spec.name + " is stopping");
  if (volume == d.spec.name) {
    return Status::Busy("volume " + volume + " is the cache's own (" +
                        (d.front.dm_device().empty() ? "its NBD export" : d.front.dm_device()) +
                        "): remove the others, then detach the cache");
  }
  auto it = d.added_volumes.find(volume);
  if (it == d.added_volumes.end()) return Status::NotFound("cache " + d.spec.name + " has no volume " + volume);
  Daemon::AddedVolume& v = it->second;
  CACHECORE_RETURN_IF_ERROR(RefuseWhileOpen(v.front));
  Log("info", "removing volume " + volume + ": cleaning its dirty data");
  // An online volume: its users go on while most of its dirty data is
  // cleaned; then, suspended, the rest, and it gets its own table back
  // (a failure keeps it on the cache, served). Only then does it leave
  // the cache: its users never see an error nor its origin without its
  // data.
  if (v.front.online_swapped) CACHECORE_RETURN_IF_ERROR(engine.FlushVolume(volume, progress));
  // The kernel device first (kernel NBD is one of the export's clients),
  // then the NBD clients, their requests answered before the engine stops
  // taking the volume's.
  Status stopped = StopKernelFrontEnd(v.front, [&] { return engine.FlushVolume(volume, progress); });
  PublishFrontEnd(d);
  CACHECORE_RETURN_IF_ERROR(stopped);
  if (v.backend) CACHECORE_RETURN_IF_ERROR(d.nbd->RemoveExport(volume));
  v.backend.reset();
  if (engine.volume(volume).ok()) CACHECORE_RETURN_IF_ERROR(engine.RemoveVolume(volume, progress));
  Forget(d, it);
  Log("info", "volume " + volume + " removed: its origin holds all its data");
  return SaveVolumes(d);
}

}  // namespace cachectl
