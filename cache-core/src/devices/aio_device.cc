#include "cachecore/devices/aio_device.h"

#include <libaio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <semaphore>
#include <thread>
#include <vector>

#include "devices/direct_file.h"

namespace cachecore {

namespace {

// One caller's batch: the completion thread counts it down and wakes the caller.
struct BatchWaiter {
  std::atomic<uint32_t> remaining{0};  // 32 bits: futex-waited directly
};

struct Slot {
  iocb cb;
  IoRequest* request;
  BatchWaiter* waiter;
};

// Off a reactor, batches through a context of the device's own, reaped by
// a thread of its own.
class AioDevice : public DirectFileDevice {
 public:
  AioDevice(DirectFile file, unsigned depth)
      : DirectFileDevice(std::move(file)), slots_available_(static_cast<std::ptrdiff_t>(depth)) {}

  Status Start(unsigned depth) {
    int rc = io_setup(static_cast<int>(depth), &ctx_);
    if (rc < 0) return ErrnoIoError("io_setup", -rc);
    reaper_ = std::thread([this] { ReapLoop(); });
    return Status::Ok();
  }

  ~AioDevice() override {
    stopping_.store(true);
    if (reaper_.joinable()) reaper_.join();
    if (ctx_ != nullptr) io_destroy(ctx_);
  }

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
        r.status = r.op == IoOp::kFlush ? SyncDirectFile(file_.fd) : DiscardDirectFile(file_, r.offset, r.length);
        continue;
      }
      Slot& s = slots[queued++];
      if (r.op == IoOp::kRead) io_prep_pread(&s.cb, file_.fd, r.buffer, r.length, r.offset);
      else io_prep_pwrite(&s.cb, file_.fd, r.buffer, r.length, r.offset);
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
    waiter.remaining.store(static_cast<uint32_t>(count));
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
      slots[next].request->status = ErrnoIoError("io_submit", -rc);  // fail this one, go on
      ++next;
      waiter.remaining.fetch_sub(1);
    }
    for (uint32_t left = waiter.remaining.load(); left != 0; left = waiter.remaining.load()) {
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
      r->status = ErrnoIoError(std::string("aio ") + IoOpName(r->op) + " at " +
                                  std::to_string(r->offset), static_cast<int>(-res));
    } else if (static_cast<uint64_t>(res) != r->length) {
      r->status = Status::IoError(std::string("short aio ") + IoOpName(r->op) + " at " +
                                  std::to_string(r->offset));
    }
    BatchWaiter* waiter = slot->waiter;
    slots_available_.release();
    if (waiter->remaining.fetch_sub(1) == 1) waiter->remaining.notify_all();
  }

  io_context_t ctx_ = nullptr;
  std::counting_semaphore<> slots_available_;
  std::atomic<bool> stopping_{false};
  std::thread reaper_;
};

}  // namespace

Result<std::unique_ptr<BlockDevice>> OpenAioDevice(const std::string& path,
                                                   const AioOptions& options) {
  Result<DirectFile> file = OpenDirectFile(path, options.read_only);
  if (!file.ok()) return file.status();
  auto device = std::make_unique<AioDevice>(std::move(file.value()), options.queue_depth);
  Status started = device->Start(options.queue_depth);
  if (!started.ok()) return started;
  return std::unique_ptr<BlockDevice>(std::move(device));
}

}  // namespace cachecore
