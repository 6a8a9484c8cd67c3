#include "cachecore/devices/aio_device.h"

#include <fcntl.h>
#include <libaio.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cerrno>
#include <cstring>
#include <semaphore>
#include <thread>
#include <vector>

namespace cachecore {

namespace {

Status ErrnoStatus(const std::string& what, int err) {
  return Status::IoError(what + ": " + std::strerror(err));
}

// One caller's batch: the completion thread counts it down and wakes the caller.
struct BatchWaiter {
  std::atomic<size_t> remaining{0};
};

struct Slot {
  iocb cb;
  IoRequest* request;
  BatchWaiter* waiter;
};

class AioDevice : public BlockDevice {
 public:
  AioDevice(int fd, bool is_block, uint64_t size, std::string identity, unsigned depth)
      : fd_(fd), is_block_(is_block), size_(size), identity_(std::move(identity)),
        slots_available_(static_cast<std::ptrdiff_t>(depth)) {}

  Status Start(unsigned depth) {
    int rc = io_setup(static_cast<int>(depth), &ctx_);
    if (rc < 0) return ErrnoStatus("io_setup", -rc);
    reaper_ = std::thread([this] { ReapLoop(); });
    return Status::Ok();
  }

  ~AioDevice() override {
    stopping_.store(true);
    if (reaper_.joinable()) reaper_.join();
    if (ctx_ != nullptr) io_destroy(ctx_);
    close(fd_);
  }

  uint64_t size_bytes() const override { return size_; }
  std::string identity() const override { return identity_; }
  bool supports_discard() const override { return true; }

  Status SubmitAndWait(std::span<IoRequest> requests) override {
    // Small batches live on the stack: no allocation on the common path.
    constexpr size_t kInline = 16;
    Slot inline_slots[kInline];
    std::vector<Slot> heap_slots;
    Slot* slots = inline_slots;
    if (requests.size() > kInline) {
      heap_slots.resize(requests.size());
      slots = heap_slots.data();
    }
    BatchWaiter waiter;
    size_t queued = 0;
    for (IoRequest& r : requests) {
      r.status = CheckRequest(r);
      if (!r.status.ok()) continue;
      if (r.op == IoOp::kFlush || r.op == IoOp::kDiscard) {
        r.status = r.op == IoOp::kFlush ? SyncNow() : DiscardNow(r.offset, r.length);
        continue;
      }
      Slot& s = slots[queued++];
      if (r.op == IoOp::kRead) io_prep_pread(&s.cb, fd_, r.buffer, r.length, r.offset);
      else io_prep_pwrite(&s.cb, fd_, r.buffer, r.length, r.offset);
      s.cb.data = &s;
      s.request = &r;
      s.waiter = &waiter;
    }
    if (queued > 0) SubmitSlots(slots, queued, waiter);
    for (IoRequest& r : requests) {
      if (!r.status.ok()) return r.status;
    }
    return Status::Ok();
  }

 private:
  // Hands the batch to the kernel in as few io_submit calls as the queue depth
  // allows, then sleeps until the completion thread has counted it down.
  void SubmitSlots(Slot* slots, size_t count, BatchWaiter& waiter) {
    waiter.remaining.store(count);
    constexpr size_t kMaxPerCall = 64;
    iocb* batch[kMaxPerCall];
    size_t next = 0;
    while (next < count) {
      slots_available_.acquire();
      size_t take = 1;
      while (next + take < count && take < kMaxPerCall && slots_available_.try_acquire()) ++take;
      for (size_t i = 0; i < take; ++i) batch[i] = &slots[next + i].cb;
      int rc = io_submit(ctx_, static_cast<long>(take), batch);
      size_t submitted = rc > 0 ? static_cast<size_t>(rc) : 0;
      for (size_t i = submitted; i < take; ++i) slots_available_.release();
      next += submitted;
      if (rc >= 0 || rc == -EAGAIN || rc == -EINTR) continue;
      slots[next].request->status = ErrnoStatus("io_submit", -rc);  // fail this one, go on
      ++next;
      waiter.remaining.fetch_sub(1);
    }
    for (size_t left = waiter.remaining.load(); left != 0; left = waiter.remaining.load()) {
      waiter.remaining.wait(left);
    }
  }

  void ReapLoop() {
    io_event events[64];
    while (!stopping_.load()) {
      timespec timeout{0, 50 * 1000 * 1000};
      int n = io_getevents(ctx_, 1, 64, events, &timeout);
      for (int i = 0; i < n; ++i) Complete(events[i]);
    }
  }

  void Complete(const io_event& event) {
    auto* slot = static_cast<Slot*>(event.data);
    IoRequest* r = slot->request;
    long res = static_cast<long>(event.res);
    if (res < 0) {
      r->status = ErrnoStatus(std::string("aio ") + IoOpName(r->op) + " at " +
                                  std::to_string(r->offset), static_cast<int>(-res));
    } else if (static_cast<uint64_t>(res) != r->length) {
      r->status = Status::IoError(std::string("short aio ") + IoOpName(r->op) + " at " +
                                  std::to_string(r->offset));
    }
    BatchWaiter* waiter = slot->waiter;
    slots_available_.release();
    if (waiter->remaining.fetch_sub(1) == 1) waiter->remaining.notify_all();
  }

  Status SyncNow() {
    if (fdatasync(fd_) != 0) return ErrnoStatus("fdatasync", errno);
    return Status::Ok();
  }

  Status DiscardNow(uint64_t offset, uint64_t length) {
    if (is_block_) {
      uint64_t range[2] = {offset, length};
      if (ioctl(fd_, BLKDISCARD, range) == 0) return Status::Ok();
      // A disk without discard support keeps the old data: callers decide.
      return errno == EOPNOTSUPP ? Status::NotSupported("discard") : ErrnoStatus("BLKDISCARD", errno);
    }
    if (fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(offset), static_cast<off_t>(length)) == 0) {
      return Status::Ok();
    }
    return errno == EOPNOTSUPP ? Status::NotSupported("discard") : ErrnoStatus("punch hole", errno);
  }

  int fd_;
  bool is_block_;
  uint64_t size_;
  std::string identity_;
  io_context_t ctx_ = nullptr;
  std::counting_semaphore<> slots_available_;
  std::atomic<bool> stopping_{false};
  std::thread reaper_;
};

std::string RealPath(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return path;
  return resolved;
}

}  // namespace

Result<std::unique_ptr<BlockDevice>> OpenAioDevice(const std::string& path,
                                                   const AioOptions& options) {
  int flags = (options.read_only ? O_RDONLY : O_RDWR) | O_DIRECT | O_CLOEXEC;
  struct stat before {};
  // A block device is opened exclusively: one that is mounted or held by
  // another program (another cache, LVM, md) is refused, not shared.
  if (stat(path.c_str(), &before) == 0 && S_ISBLK(before.st_mode) && !options.read_only) {
    flags |= O_EXCL;
  }
  int fd = open(path.c_str(), flags);
  if (fd < 0 && errno == EBUSY) {
    return Status::Busy(path + " is in use (mounted, or held by another program)");
  }
  if (fd < 0) return ErrnoStatus("cannot open " + path, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return ErrnoStatus("cannot stat " + path, err);
  }
  bool is_block = S_ISBLK(st.st_mode);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (is_block && ioctl(fd, BLKGETSIZE64, &size) != 0) {
    int err = errno;
    close(fd);
    return ErrnoStatus("cannot read the size of " + path, err);
  }
  if (!is_block && !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::InvalidArgument(path + " is neither a block device nor a regular file");
  }
  if (size == 0 || size % kSectorSize != 0) {
    close(fd);
    return Status::InvalidArgument(path + " has a size of " + std::to_string(size) +
                                   " bytes; it must be a non-zero multiple of 512");
  }
  std::string identity = (is_block ? "blkdev:" : "file:") + RealPath(path);
  auto device = std::make_unique<AioDevice>(fd, is_block, size, identity, options.queue_depth);
  Status started = device->Start(options.queue_depth);
  if (!started.ok()) return started;
  return std::unique_ptr<BlockDevice>(std::move(device));
}

}  // namespace cachecore
