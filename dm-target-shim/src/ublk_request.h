// How one ublk request is run: the descriptor the kernel's ublk driver fills
// in for each tag (struct ublksrv_io_desc) turned into calls on a
// BlockBackend. Internal to the shim; apart from ublk_device.cc, which needs
// /dev/ublk-control, so that tests can run descriptors without a kernel.
#pragma once

#include <linux/ublk_cmd.h>

#include <cstdint>

#include "shim/block_backend.h"

namespace shim {

// What a descriptor asks for, in bytes.
struct UblkRequest {
  uint8_t op = 0;    // UBLK_IO_OP_*
  bool fua = false;  // the data must be durable when the request completes
  uint64_t offset = 0;
  uint64_t length = 0;
};

UblkRequest DecodeUblkRequest(const ublksrv_io_desc& desc);

// Runs the request in `desc` on `backend`; `buf` holds its data (read into,
// written from), at least desc.nr_sectors * 512 bytes. Returns the value to
// commit to the kernel: the bytes done for a read or a write, 0 for the
// other operations; on failure the backend's Status as a negative errno
// (-ErrnoOf), and -EOPNOTSUPP for an operation it does not know.
int32_t RunUblkRequest(BlockBackend& backend, const ublksrv_io_desc& desc, uint8_t* buf);

}  // namespace shim
