// What the libaio and io_uring devices share: opening a file or block device
// for direct I/O (checked, named in every error), and the calls that are not
// reads or writes (flush, discard). Not a public header.
#pragma once

#include <cstdint>
#include <string>

#include "cachecore/base/status.h"
#include "cachecore/devices/block_device.h"

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

// Beyond this a transfer is cut (an SQE's length is 32 bits).
constexpr uint64_t kMaxTransfer = 1u << 30;

// What the libaio and io_uring devices share: the file, and Submit on a
// reactor. There reads, writes and flushes go on the reactor (its ring, or
// libaio under epoll where io_uring cannot be used: Reactor::UsesIoUring),
// so the engine serves every request on its reactors with either device;
// discards stay synchronous (no asynchronous BLKDISCARD or hole punch).
// Off a reactor, the device's own SubmitAndWait runs.
class DirectFileDevice : public BlockDevice {
 public:
  explicit DirectFileDevice(DirectFile file) : file_(std::move(file)) {}
  ~DirectFileDevice() override;  // closes the file

  uint64_t size_bytes() const override { return file_.size; }
  std::string identity() const override { return file_.identity; }
  bool supports_discard() const override { return true; }
  void Submit(AsyncIo& io) override;

 protected:
  DirectFile file_;
};

}  // namespace cachecore
