// How one ublk request is run: the descriptor the kernel's ublk driver fills
// in for each tag (struct ublksrv_io_desc) turned into a BlockBackend's
// asynchronous calls, and their answer into the value the tag commits.
// Internal to the shim; apart from the queue (ublk_queue.cc, which needs
// /dev/ublkc*) so that tests can run descriptors without a kernel.
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

// One tag's request in flight. Start() hands it to the backend and returns
// at once (an asynchronous backend never blocks it); when the backend has
// answered (a write of zeroes: every chunk, one after another) Finished()
// gets the value to commit. Reused for the tag's next request.
class UblkRequestRun : public Completion {
 public:
  // `buf` holds the request's data (read into, written from), at least
  // desc.nr_sectors * 512 bytes; it and `backend` stay until Finished().
  void Start(BlockBackend& backend, const ublksrv_io_desc& desc, uint8_t* buf);
  // The backend's answer to each call Start (or a chunk) made.
  void Done(Status status) final;

 protected:
  ~UblkRequestRun() = default;
  // Once per Start, on the thread of the backend's last answer (inside
  // Start when it answered at once). `result`: the bytes done for a read or
  // a write, 0 for the other operations (the driver looks only at the
  // sign); on failure the backend's Status as a negative errno (-ErrnoOf:
  // ENOSPC, EOPNOTSUPP and EBUSY keep their meaning, the kernel takes an
  // errno it has no block status for as EIO), and -EOPNOTSUPP for an
  // operation it does not know.
  virtual void Finished(int32_t result) = 0;

 private:
  BlockBackend* backend_ = nullptr;
  UblkRequest request_;
  uint64_t zeroed_ = 0;  // a write of zeroes: bytes asked of the backend so far
};

}  // namespace shim
