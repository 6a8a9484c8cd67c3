#include "cachecore/devices/uring_device.h"

#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "devices/direct_file.h"

namespace cachecore {

namespace {

constexpr unsigned kRingEntries = 64;

// A thread's own ring for synchronous batches. Only its thread submits to it
// and reaps it, so every completion in it belongs to the call under way.
class ThreadRing {
 public:
  ThreadRing() = default;
  ~ThreadRing() { if (ready_) io_uring_queue_exit(&ring_); }
  ThreadRing(const ThreadRing&) = delete;
  ThreadRing& operator=(const ThreadRing&) = delete;

  // Sets the ring up. Single issuer with deferred task work (Linux 6.1):
  // completions are processed when this thread waits for them, not by
  // interrupting it; older kernels refuse the flags and get a plain ring.
  int Init() {
    io_uring_params params{};
    params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    int rc = io_uring_queue_init_params(kRingEntries, &ring_, &params);
    if (rc == -EINVAL) rc = io_uring_queue_init(kRingEntries, &ring_, 0);
    ready_ = rc == 0;
    owner_ = gettid();
    return rc;
  }
  io_uring* ring() { return &ring_; }
  // False in a child process after fork(): the ring belongs to the parent's
  // thread (a single-issuer ring refuses anyone else with EEXIST).
  bool Mine() const { return owner_ == gettid(); }

 private:
  io_uring ring_{};
  bool ready_ = false;
  pid_t owner_ = 0;
};

thread_local std::unique_ptr<ThreadRing> this_thread_ring;

// This thread's ring, set up on first use; nullptr (and `error` set) when
// io_uring cannot be used. A ring that was dropped is set up again.
io_uring* ThisThreadRing(Status& error) {
  if (this_thread_ring && this_thread_ring->Mine()) return this_thread_ring->ring();
  auto ring = std::make_unique<ThreadRing>();
  if (int rc = ring->Init(); rc < 0) {
    error = ErrnoIoError("io_uring_queue_init", -rc);
    return nullptr;
  }
  this_thread_ring = std::move(ring);
  return this_thread_ring->ring();
}

// A transfer's result into its status. A short one (a cut one, or one the
// kernel ended early; not seen with O_DIRECT inside the device) is finished
// with plain calls.
void FinishTransfer(int fd, IoRequest& r, int res) {
  if (res < 0) {
    r.status = ErrnoIoError(std::string(IoOpName(r.op)) + " at " +
                            std::to_string(r.offset), -res);
    return;
  }
  for (uint64_t done = static_cast<uint64_t>(res); done < r.length;) {
    auto* at = static_cast<uint8_t*>(r.buffer) + done;
    off_t pos = static_cast<off_t>(r.offset + done);
    ssize_t n = r.op == IoOp::kRead ? pread(fd, at, r.length - done, pos)
                                    : pwrite(fd, at, r.length - done, pos);
    if (n <= 0) {
      r.status = Status::IoError(std::string("short ") + IoOpName(r.op) + " at " +
                                 std::to_string(r.offset));
      return;
    }
    done += static_cast<uint64_t>(n);
  }
}

// Off a reactor, batches on a ring of the calling thread's own.
class UringDevice : public DirectFileDevice {
 public:
  explicit UringDevice(DirectFile file) : DirectFileDevice(std::move(file)) {}

  Status SubmitAndWait(std::span<IoRequest> requests) override {
    Status ring_error;
    io_uring* ring = ThisThreadRing(ring_error);
    for (IoRequest& r : requests) {
      r.status = ring ? CheckRequest(r) : ring_error;
      if (r.status.ok() && (r.op == IoOp::kFlush || r.op == IoOp::kDiscard)) {
        r.status = r.op == IoOp::kFlush ? SyncDirectFile(file_.fd)
                                        : DiscardDirectFile(file_, r.offset, r.length);
      }
    }
    if (ring != nullptr) RunTransfers(ring, requests);
    for (IoRequest& r : requests) {
      if (!r.status.ok()) return r.status;
    }
    return Status::Ok();
  }

 private:
  static bool IsTransfer(const IoRequest& r) {
    return r.status.ok() && (r.op == IoOp::kRead || r.op == IoOp::kWrite);
  }

  // Runs the batch's reads and writes, as many at once as the ring holds.
  void RunTransfers(io_uring* ring, std::span<IoRequest> requests) {
    size_t next = 0, in_flight = 0;
    while (true) {
      while (next < requests.size() && !IsTransfer(requests[next])) ++next;
      for (io_uring_sqe* sqe; next < requests.size() && (sqe = io_uring_get_sqe(ring));) {
        Prepare(sqe, requests[next], next);
        ++in_flight;
        while (++next < requests.size() && !IsTransfer(requests[next])) {}
      }
      if (in_flight == 0) return;
      int rc = io_uring_submit_and_wait(ring, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        FailRing(ring, requests, next, in_flight, -rc);
        return;
      }
      in_flight -= Reap(ring, requests);
    }
  }

  void Prepare(io_uring_sqe* sqe, IoRequest& r, size_t index) {
    auto length = static_cast<unsigned>(std::min(r.length, kMaxTransfer));
    if (r.op == IoOp::kRead) io_uring_prep_read(sqe, file_.fd, r.buffer, length, r.offset);
    else io_uring_prep_write(sqe, file_.fd, r.buffer, length, r.offset);
    io_uring_sqe_set_data64(sqe, index);
  }

  // Takes every completion waiting; returns how many.
  size_t Reap(io_uring* ring, std::span<IoRequest> requests) {
    size_t reaped = 0;
    io_uring_cqe* cqe;
    while (io_uring_peek_cqe(ring, &cqe) == 0) {
      FinishTransfer(file_.fd, requests[io_uring_cqe_get_data64(cqe)], cqe->res);
      io_uring_cqe_seen(ring, cqe);
      ++reaped;
    }
    return reaped;
  }

  // The ring refused to submit (no memory, or worse). Waits for what the
  // kernel took (its buffers are the callers'), fails every transfer of the
  // batch, and drops the ring so that those prepared but never submitted
  // cannot run later.
  void FailRing(io_uring* ring, std::span<IoRequest> requests, size_t next, size_t in_flight,
                int err) {
    for (size_t taken = in_flight - io_uring_sq_ready(ring); taken > 0;) {
      io_uring_cqe* cqe;
      int rc = io_uring_wait_cqe(ring, &cqe);
      if (rc == -EINTR || rc == -EAGAIN) continue;
      if (rc < 0) break;  // nothing more will come; the ring goes below
      io_uring_cqe_seen(ring, cqe);
      --taken;
    }
    for (size_t i = 0; i < next; ++i) {
      if (IsTransfer(requests[i])) requests[i].status = ErrnoIoError("io_uring_submit", err);
    }
    this_thread_ring.reset();
  }
};

}  // namespace

void AsyncIo::OnComplete(int result) {
  if (request.op == IoOp::kFlush) {
    request.status = result < 0 ? ErrnoIoError("fdatasync", -result) : Status::Ok();
  } else {
    FinishTransfer(fd, request, result);
  }
  done->IoDone(*this);
}

Status UringUsable() {
  static const Status usable = [] {
    if (!Reactor::UsesIoUring()) {
      return Status::NotSupported("io_uring is not used here (refused by the kernel, or CACHECTL_IO_URING=off)");
    }
    ThreadRing probe;
    int rc = probe.Init();
    return rc == 0 ? Status::Ok() : ErrnoIoError("io_uring cannot be used here (io_uring_setup)", -rc);
  }();
  return usable;
}

Result<std::unique_ptr<BlockDevice>> OpenUringDevice(const std::string& path, bool read_only) {
  CACHECORE_RETURN_IF_ERROR(UringUsable());
  Result<DirectFile> file = OpenDirectFile(path, read_only);
  if (!file.ok()) return file.status();
  return std::unique_ptr<BlockDevice>(new UringDevice(std::move(file.value())));
}

}  // namespace cachecore
