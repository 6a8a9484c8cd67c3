// The reactor's events where io_uring cannot be used (a kernel built
// without it, a container whose seccomp profile refuses io_uring_setup, or
// CACHECTL_IO_URING=off): file I/O through libaio, its completions
// signalled on an eventfd; sockets by epoll readiness and non-blocking
// calls; timers from a heap behind one timerfd; all waited for in one
// epoll_wait. The contract is the ring's: an operation completes later,
// never inside the call that started it, on the reactor's thread. Not a
// public header: Reactor (reactor.cc) is its only user.
#pragma once

#include <libaio.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <memory>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cachecore/base/status.h"
#include "cachecore/devices/reactor.h"

namespace cachecore {

class PollLoop {
 public:
  // Ready once the owner's `wake_fd` (an eventfd it writes to wake the
  // loop) is watched too.
  static Result<std::unique_ptr<PollLoop>> Create(int wake_fd);
  ~PollLoop();
  PollLoop(const PollLoop&) = delete;
  PollLoop& operator=(const PollLoop&) = delete;

  // As Reactor's operations; the buffers, `msg` and `op` stay until the
  // op's completion is handed out by Wait.
  void Read(int fd, void* buffer, uint32_t length, uint64_t offset, ReactorOp* op);
  void Write(int fd, const void* buffer, uint32_t length, uint64_t offset, ReactorOp* op);
  void Fsync(int fd, ReactorOp* op);
  void Recv(int fd, void* buffer, uint32_t length, ReactorOp* op);
  void SendMsg(int fd, const msghdr* msg, ReactorOp* op);
  void After(uint64_t nanoseconds, ReactorTimer* timer);

  // Hands the file I/O queued so far to the kernel.
  void Submit();
  // Submits, then waits for an event (not at all unless `block`), and
  // appends the operations that completed, with their results (bytes, or
  // -errno; -ETIME for a timer), to `completed`. The wake fd's count is
  // consumed here.
  void Wait(bool block, std::vector<std::pair<ReactorOp*, int>>& completed);

 private:
  struct FileOp {
    iocb cb;
    ReactorOp* op;
  };
  // A socket's operations waiting for it (at most one of each kind, as the
  // ring's users have) and the events epoll watches for them.
  struct SocketOps {
    ReactorOp* recv = nullptr;
    void* buffer = nullptr;
    uint32_t length = 0;
    ReactorOp* send = nullptr;
    const msghdr* msg = nullptr;
    uint32_t watched = 0;
    bool to_try = false;
  };
  struct Deadline {
    int64_t at_ns;
    ReactorTimer* timer;
    bool operator>(const Deadline& other) const { return at_ns > other.at_ns; }
  };

  PollLoop() = default;
  FileOp* TakeFileOp(ReactorOp* op);
  bool StartAio();
  static int RunInline(const iocb& cb);
  void QueueFile(FileOp* f);
  void AnswerLater(FileOp* f, int result);
  void ReapFiles(std::vector<std::pair<ReactorOp*, int>>& completed);
  SocketOps& ToTry(int fd);
  void TrySocket(int fd, std::vector<std::pair<ReactorOp*, int>>& completed);
  void Watch(int fd, SocketOps& ops, uint32_t events);
  void ArmTimer();
  void ExpireTimers(std::vector<std::pair<ReactorOp*, int>>& completed);

  int epoll_fd_ = -1, wake_fd_ = -1, aio_fd_ = -1, timer_fd_ = -1;
  io_context_t aio_ = nullptr;
  bool aio_refused_ = false;  // io_setup failed: file I/O runs inline
  std::vector<std::unique_ptr<FileOp>> file_ops_;  // all ever made, reused
  std::vector<FileOp*> free_file_ops_;
  std::vector<iocb*> queued_;  // file I/O not yet handed to the kernel
  uint64_t files_in_kernel_ = 0;
  // Results known without the kernel's completion (file I/O refused or
  // run here, a socket epoll cannot watch), handed out by the next Wait.
  std::vector<std::pair<ReactorOp*, int>> refused_;
  std::unordered_map<int, SocketOps> sockets_;
  std::vector<int> to_try_, trying_;
  std::priority_queue<Deadline, std::vector<Deadline>, std::greater<Deadline>> timers_;
  int64_t armed_at_ns_ = -1;  // the timerfd's deadline, or -1
  std::array<io_event, 64> events_{};
};

}  // namespace cachecore
