// KernelNbd: makes the kernel's NBD driver a client of our NBD server, so
// the cached volume is a block device, /dev/nbdN. A socketpair joins them:
// one end goes to the kernel through the nbd generic-netlink family (as
// rbd-nbd and qemu-nbd -c do), or through the older ioctl interface where
// the kernel has no netlink family (CACHECTL_NBD_IOCTL=1 forces it); the
// other end is served in transmission mode.
//
// A daemon that dies leaves a netlink device connected to a dead socket:
// the kernel holds new I/O for kReattachSeconds and Reconnect hands the
// same /dev/nbdN to the next daemon (NBD_CMD_RECONFIGURE, as rbd-nbd
// attach does). An ioctl device cannot be handed over: its I/O fails from
// the moment its daemon dies.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "shim/kernel_device.h"
#include "shim/nbd_server.h"

namespace shim {

class KernelNbd : public KernelDevice {
 public:
  // How long the kernel holds the I/O of a device whose daemon died
  // (NBD_ATTR_DEAD_CONN_TIMEOUT) before it fails it: time for a restart by
  // hand or by systemd; a filesystem above sees a pause, not an error.
  static constexpr uint64_t kReattachSeconds = 300;

  // Connects a free /dev/nbdN. `backend` names what it serves: the kernel
  // shows it in /sys/block/nbdN/backend and Reconnect must give the same.
  // kNotSupported when the kernel has no NBD driver (after trying to load
  // the module). The kernel's requests go to `server`'s export
  // `export_name` ("": its first).
  static Result<std::unique_ptr<KernelNbd>> Connect(NbdServer* server, uint64_t size_bytes,
                                                    uint32_t block_size, const std::string& backend,
                                                    const std::string& export_name = "");
  // Hands /dev/nbd<index>, which a daemon that died left connected through
  // netlink, to `server`: the kernel sends the I/O it held, and the
  // requests the dead daemon had taken, on the new socket. kNotFound when
  // the device is no longer connected (nothing to take back); kBusy when it
  // serves another backend, or its old connection still looks alive after
  // a few seconds (the old daemon is not dead). Bounded in time.
  static Result<std::unique_ptr<KernelNbd>> Reconnect(NbdServer* server, int index,
                                                      const std::string& backend,
                                                      const std::string& export_name = "");
  ~KernelNbd() override;  // disconnects if still connected
  const std::string& device() const override { return device_; }
  int index() const { return index_; }
  bool by_ioctl() const { return ioctl_fd_ >= 0; }
  // Asks the kernel to let go of the device; idempotent.
  Status Disconnect() override;

 private:
  KernelNbd(int index, std::string device) : index_(index), device_(std::move(device)) {}
  static Result<std::unique_ptr<KernelNbd>> ConnectByIoctl(int kernel_end, uint64_t size_bytes,
                                                           uint32_t block_size);
  static Result<int> HandOverSocket(uint16_t family, int index, const std::string& backend);
  int index_;
  std::string device_;
  bool connected_ = true;
  int ioctl_fd_ = -1;         // the ioctl interface: the open /dev/nbdN ...
  std::thread ioctl_thread_;  // ... and the thread blocked in NBD_DO_IT
};

}  // namespace shim
