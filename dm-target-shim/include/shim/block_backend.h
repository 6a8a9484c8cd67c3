// BlockBackend: the block device both front ends serve (the NBD server and
// ublk; the daemon's is the engine, through EngineBackend), and the two
// things both do with one: write zeroes, and turn a Status into an errno.
#pragma once

#include <cstdint>

#include "cachecore/base/status.h"
#include "cachecore/engine/engine.h"

namespace shim {

using cachecore::Result;
using cachecore::Status;
// Done(status) runs once per asynchronous request, on any thread.
using Completion = cachecore::EngineCompletion;

// What a front end exports. Calls come from the front end's serving
// threads, several at once. Offsets and lengths are already checked against
// size() (multiples of 512, within the device) before a call is made.
class BlockBackend {
 public:
  virtual ~BlockBackend() = default;
  virtual uint64_t size() const = 0;
  virtual uint32_t preferred_block_size() const = 0;
  // Fills `buffer` (at least `length` bytes).
  virtual Status Read(uint64_t offset, void* buffer, uint64_t length) = 0;
  // fua: the data is durable when the call returns OK, and so is every
  // write completed before it.
  virtual Status Write(uint64_t offset, const void* buffer, uint64_t length, bool fua) = 0;
  // Every write completed before it is durable when it returns OK, on
  // whichever connection or queue it arrived (so NBD's MULTI_CONN holds).
  virtual Status Flush() = 0;
  // The range may read back as anything afterwards (NBD TRIM, ublk DISCARD).
  virtual Status Trim(uint64_t offset, uint64_t length) = 0;

  // Whether the calls below return without blocking (an engine: requests
  // are served on the calling reactor). A front end runs on a reactor only
  // then; otherwise it serves from threads with the calls above, which the
  // defaults below also use.
  virtual bool asynchronous() const { return false; }
  // As the calls above; each returns at once and `done` runs when the
  // request completes (buffers stay until then).
  virtual void ReadAsync(uint64_t offset, void* buffer, uint64_t length, Completion* done);
  virtual void WriteAsync(uint64_t offset, const void* buffer, uint64_t length, bool fua,
                          Completion* done);
  virtual void FlushAsync(Completion* done);
  virtual void TrimAsync(uint64_t offset, uint64_t length, Completion* done);
};

// A buffer of zeroes to write from, ZeroChunkBytes() long; never freed
// (serving threads may still be writing from it at exit).
const void* ZeroChunk();
uint32_t ZeroChunkBytes();

// Writes zeroes over [offset, offset + length) through backend.Write, in
// chunks from one shared zero-filled buffer. With fua, only the last chunk
// carries FUA: a FUA write makes the chunks completed before it durable
// too, so one sync covers the range. Returns the first failed chunk's
// Status (chunks before it stay written, as with any failed write).
Status WriteZeroes(BlockBackend& backend, uint64_t offset, uint64_t length, bool fua);

// WriteZeroes on the asynchronous calls, a chunk at a time: hands the chunk
// of [offset, offset + length) that starts `*zeroed` bytes in to
// backend.WriteAsync and advances `*zeroed`; `done` runs when that chunk
// completes, and calls again while *zeroed < length (and it succeeded).
// As with WriteZeroes, only the last chunk carries FUA.
void WriteNextZeroChunk(BlockBackend& backend, uint64_t offset, uint64_t length, bool fua,
                        uint64_t* zeroed, Completion* done);

// The errno (positive; 0 for OK) a front end reports for `s`, the one
// place a Status becomes an errno:
//   InvalidArgument -> EINVAL; OutOfRange, NoSpace -> ENOSPC (NBD's
//   answer to a write past the end);
//   Busy -> EBUSY (the engine says Busy once it is shut down);
//   NotSupported -> EOPNOTSUPP; anything else -> EIO.
int ErrnoOf(const Status& s);

}  // namespace shim
