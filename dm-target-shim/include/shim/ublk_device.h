// UblkDevice: the cached volume as /dev/ublkbN through the kernel's ublk
// driver (Linux 6.0 and later): io_uring commands on /dev/ublk-control to
// add, configure, start, stop and delete the device, and one queue thread
// per hardware queue that fetches requests, runs them on the backend and
// commits the results.
#pragma once

#include <memory>
#include <string>

#include "shim/block_backend.h"
#include "shim/kernel_device.h"

namespace shim {

class UblkDevice : public KernelDevice {
 public:
  // kNotSupported when the kernel has no ublk (after trying the module).
  // The device is added with user recovery: if its daemon dies, the kernel
  // holds its I/O until a new daemon takes the device back.
  //
  // recover_id >= 0: first try to take back /dev/ublkb<recover_id>, left by
  // a daemon that died; a fresh device is added when there is none to take.
  //
  // `backend` is not owned and must outlive the device; the queue threads
  // call it, one request at a time each.
  static Result<std::unique_ptr<UblkDevice>> Start(BlockBackend* backend, uint64_t size_bytes,
                                                     int recover_id = -1);
  int id() const;
  bool recovered() const;  // true when Start took an existing device back
  ~UblkDevice() override;
  const std::string& device() const override;
  Status Disconnect() override;  // stops and deletes the device

  struct Impl;

 private:
  explicit UblkDevice(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shim
