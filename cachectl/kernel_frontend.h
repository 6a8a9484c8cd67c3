// A volume's kernel block device over the running daemon's engine: ublk or
// kernel NBD, taken back from a daemon of this cache that died when it can
// be, and the device-mapper table over it (a plain /dev/mapper/NAME, or an
// online volume swapped onto it). The cache's first volume has one, and
// each added volume its own. Internal to the cachectl executable.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cachecore/base/status.h"
#include "shim/engine_backend.h"
#include "shim/kernel_device.h"
#include "shim/nbd_server.h"

namespace cachectl {

struct KernelFrontEnd {
  // What to serve, set before StartKernelFrontEnd.
  std::string cache_name;     // for messages ("cachectl start NAME")
  std::string dm_name;        // /dev/mapper/dm_name goes over the kernel device ...
  std::string online_volume;  // ... unless this dm volume, in use, is pointed at it instead
  std::string online_table;   // that volume's own table (encoded), given back at stop
  std::string state_prefix;   // PREFIXublk-id or PREFIXnbd-device name the device for the next daemon
  std::string backend_id;     // names it to the kernel's NBD driver
  std::string export_name;    // the NBD export a kernel NBD device is served by
  std::string frontend;       // auto, ublk, nbd or socket
  shim::BlockBackend* backend = nullptr;
  shim::NbdServer* nbd = nullptr;
  uint64_t size = 0;  // bytes
  // An online volume that had its own table while the engine kept its
  // lines (a stop, a removal cut short) may have been written around the
  // cache: this empties the volume from the cache before it goes through
  // it again (Engine::EvictVolume).
  std::function<cachecore::Status()> evict;

  // What StartKernelFrontEnd chose.
  std::unique_ptr<shim::KernelDevice> kernel;  // /dev/ublkbN or /dev/nbdN, when one runs
  bool dm_created = false;                     // /dev/mapper/dm_name over it
  bool online_swapped = false;                 // the online volume points at it
  std::string note;                            // ublk, nbd or socket, for stats
  std::string not_taken_back;                  // why a device a dead daemon left was not taken back
  bool refused_over_dead_device = false;       // so 'auto' does not fall back to the socket alone

  // The dm device users see ("" while none): /dev/mapper/dm_name or the
  // online volume.
  std::string dm_device() const;
  std::string kernel_device() const { return kernel ? kernel->device() : ""; }
};

// Connects the kernel device `f.frontend` asks for and puts the dm device
// over it (socket: neither; auto: the socket alone where the kernel has
// neither ublk nor NBD, except for an online volume). Refuses (writing
// nothing) over a device a dead daemon left that cannot be taken back but
// is still in use.
cachecore::Status StartKernelFrontEnd(KernelFrontEnd& f);
// kBusy, naming it, while /dev/mapper/dm_name is open (mounted, say).
cachecore::Status RefuseWhileOpen(const KernelFrontEnd& f);
// Takes the dm device off the kernel device and disconnects it: kBusy (and
// nothing changed) while /dev/mapper/dm_name is open. An online volume is
// given its own table back; `clean` runs first, with the volume suspended
// (nothing new reaches the cache), and must leave none of its data dirty;
// its failure keeps the volume on the cache. Then, until ForgetRelease,
// a state file says the volume had its own table: the next start empties
// it from the cache (`evict`) before it goes through it again.
cachecore::Status StopKernelFrontEnd(KernelFrontEnd& f, const std::function<cachecore::Status()>& clean);
// The engine holds nothing of the online volume any more (it was emptied
// or removed): the next start need not empty it.
void ForgetRelease(const KernelFrontEnd& f);
// Forgets every state file of a volume that is gone from the cache.
void ForgetVolumeState(const std::string& state_prefix);

}  // namespace cachectl
