// KernelNbd: makes the kernel's NBD driver a client of our NBD server, so
// the cached volume is a block device, /dev/nbdN. A socketpair joins them:
// one end goes to the kernel through the nbd generic-netlink family (as
// rbd-nbd and qemu-nbd -c do), or through the older ioctl interface where
// the kernel has no netlink family (CACHECTL_NBD_IOCTL=1 forces it); the
// other end is served in transmission mode.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "shim/kernel_device.h"
#include "shim/nbd_server.h"

namespace shim {

class KernelNbd : public KernelDevice {
 public:
  // Connects a free /dev/nbdN. kNotSupported when the kernel has no NBD
  // driver (after trying to load the module).
  static Result<std::unique_ptr<KernelNbd>> Connect(NbdServer* server, uint64_t size_bytes,
                                                    uint32_t block_size);
  ~KernelNbd() override;  // disconnects if still connected
  const std::string& device() const override { return device_; }
  // Asks the kernel to let go of the device; idempotent.
  Status Disconnect() override;

 private:
  KernelNbd(int index, std::string device) : index_(index), device_(std::move(device)) {}
  static Result<std::unique_ptr<KernelNbd>> ConnectByIoctl(int kernel_end, uint64_t size_bytes,
                                                           uint32_t block_size);
  int index_;
  std::string device_;
  bool connected_ = true;
  int ioctl_fd_ = -1;         // the ioctl interface: the open /dev/nbdN ...
  std::thread ioctl_thread_;  // ... and the thread blocked in NBD_DO_IT
};

}  // namespace shim
