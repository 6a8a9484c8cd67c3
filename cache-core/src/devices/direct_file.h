// What the libaio and io_uring devices share: opening a file or block device
// for direct I/O (checked, named in every error), and the calls that are not
// reads or writes (flush, discard). Not a public header.
#pragma once

#include <cstdint>
#include <string>

#include "cachecore/base/status.h"

namespace cachecore {

struct DirectFile {
  int fd = -1;
  bool is_block = false;
  uint64_t size = 0;
  std::string identity;  // "blkdev:/dev/x" or "file:/real/path"
};

// Opens `path` with O_DIRECT (a writable block device exclusively, so a
// mounted or otherwise held one is refused). The caller owns the fd.
Result<DirectFile> OpenDirectFile(const std::string& path, bool read_only);

// fdatasync, as a Status naming the call.
Status SyncDirectFile(int fd);

// Discards [offset, offset+length): BLKDISCARD on a block device, a punched
// hole in a file. kNotSupported when the device or file system cannot (the
// data stays; callers decide).
Status DiscardDirectFile(const DirectFile& file, uint64_t offset, uint64_t length);

// An I/O error "what: strerror(err)".
Status ErrnoIoError(const std::string& what, int err);

}  // namespace cachecore
