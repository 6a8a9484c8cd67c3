#include "devices/direct_file.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "cachecore/devices/block_device.h"
#include "cachecore/devices/reactor.h"

namespace cachecore {

namespace {

std::string RealPath(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return path;
  return resolved;
}

// Size and kind of the open `fd`; the device's size for a block device.
Status Describe(const std::string& path, DirectFile& file) {
  struct stat st {};
  if (fstat(file.fd, &st) != 0) return ErrnoIoError("cannot stat " + path, errno);
  file.is_block = S_ISBLK(st.st_mode);
  file.size = static_cast<uint64_t>(st.st_size);
  if (file.is_block && ioctl(file.fd, BLKGETSIZE64, &file.size) != 0) {
    return ErrnoIoError("cannot read the size of " + path, errno);
  }
  if (!file.is_block && !S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(path + " is neither a block device nor a regular file");
  }
  if (file.size == 0 || file.size % kSectorSize != 0) {
    return Status::InvalidArgument(path + " has a size of " + std::to_string(file.size) +
                                   " bytes; it must be a non-zero multiple of 512");
  }
  file.identity = (file.is_block ? "blkdev:" : "file:") + RealPath(path);
  return Status::Ok();
}

}  // namespace

Status ErrnoIoError(const std::string& what, int err) {
  return Status::IoError(what + ": " + std::strerror(err));
}

Result<DirectFile> OpenDirectFile(const std::string& path, bool read_only) {
  int flags = (read_only ? O_RDONLY : O_RDWR) | O_DIRECT | O_CLOEXEC;
  struct stat before {};
  // A block device is opened exclusively: one that is mounted or held by
  // another program (another cache, LVM, md) is refused, not shared.
  if (stat(path.c_str(), &before) == 0 && S_ISBLK(before.st_mode) && !read_only) flags |= O_EXCL;
  DirectFile file;
  file.fd = open(path.c_str(), flags);
  if (file.fd < 0 && errno == EBUSY) {
    return Status::Busy(path + " is in use (mounted, or held by another program)");
  }
  if (file.fd < 0) return ErrnoIoError("cannot open " + path, errno);
  Status described = Describe(path, file);
  if (!described.ok()) {
    close(file.fd);
    return described;
  }
  return file;
}

Status SyncDirectFile(int fd) {
  if (fdatasync(fd) != 0) return ErrnoIoError("fdatasync", errno);
  return Status::Ok();
}

Status DiscardDirectFile(const DirectFile& file, uint64_t offset, uint64_t length) {
  if (file.is_block) {
    uint64_t range[2] = {offset, length};
    if (ioctl(file.fd, BLKDISCARD, range) == 0) return Status::Ok();
    // A disk without discard support keeps the old data: callers decide.
    return errno == EOPNOTSUPP ? Status::NotSupported("discard") : ErrnoIoError("BLKDISCARD", errno);
  }
  if (fallocate(file.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                static_cast<off_t>(length)) == 0) {
    return Status::Ok();
  }
  return errno == EOPNOTSUPP ? Status::NotSupported("discard") : ErrnoIoError("punch hole", errno);
}

DirectFileDevice::~DirectFileDevice() { close(file_.fd); }

void DirectFileDevice::Submit(AsyncIo& io) {
  Reactor* reactor = Reactor::Current();
  IoRequest& r = io.request;
  if (reactor == nullptr || r.op == IoOp::kDiscard || r.length > kMaxTransfer) {
    BlockDevice::Submit(io);
    return;
  }
  r.status = CheckRequest(r);
  if (!r.status.ok()) {
    io.done->IoDone(io);
    return;
  }
  io.fd = file_.fd;
  auto length = static_cast<uint32_t>(r.length);
  switch (r.op) {
    case IoOp::kRead: reactor->Read(file_.fd, r.buffer, length, r.offset, &io); break;
    case IoOp::kWrite: reactor->Write(file_.fd, r.buffer, length, r.offset, &io); break;
    default: reactor->Fsync(file_.fd, &io); break;
  }
}

}  // namespace cachecore
