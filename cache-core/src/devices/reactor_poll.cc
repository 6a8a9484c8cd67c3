#include "devices/reactor_poll.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace cachecore {

namespace {

// File I/O in the kernel at once; more waits in queued_ until some
// completes. Each context counts against the system's fs.aio-max-nr
// (65536 by default), and every thread that makes synchronous engine calls
// has a reactor: kept small, and made on a reactor's first file I/O.
constexpr int kAioDepth = 256;

Status Errno(const char* what) { return Status::IoError(std::string(what) + ": " + std::strerror(errno)); }

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

bool Again(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

}  // namespace

Result<std::unique_ptr<PollLoop>> PollLoop::Create(int wake_fd) {
  std::unique_ptr<PollLoop> loop(new PollLoop());
  loop->wake_fd_ = wake_fd;
  loop->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (loop->epoll_fd_ < 0) return Errno("epoll_create1");
  loop->aio_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (loop->aio_fd_ < 0) return Errno("eventfd");
  loop->timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (loop->timer_fd_ < 0) return Errno("timerfd_create");
  for (int fd : {wake_fd, loop->aio_fd_, loop->timer_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(loop->epoll_fd_, EPOLL_CTL_ADD, fd, &ev) < 0) return Errno("epoll_ctl");
  }
  return loop;
}

PollLoop::~PollLoop() {
  // The owner ran the loop until nothing was in flight: no iocb is left.
  if (aio_ != nullptr) io_destroy(aio_);
  for (int fd : {epoll_fd_, aio_fd_, timer_fd_}) {
    if (fd >= 0) close(fd);
  }
}

// ---- files, through libaio

PollLoop::FileOp* PollLoop::TakeFileOp(ReactorOp* op) {
  if (free_file_ops_.empty()) {
    file_ops_.push_back(std::make_unique<FileOp>());
    free_file_ops_.push_back(file_ops_.back().get());
  }
  FileOp* f = free_file_ops_.back();
  free_file_ops_.pop_back();
  f->op = op;
  return f;
}

void PollLoop::QueueFile(FileOp* f) {
  io_set_eventfd(&f->cb, aio_fd_);
  f->cb.data = f;
  queued_.push_back(&f->cb);
}

void PollLoop::Read(int fd, void* buffer, uint32_t length, uint64_t offset, ReactorOp* op) {
  FileOp* f = TakeFileOp(op);
  io_prep_pread(&f->cb, fd, buffer, length, static_cast<long long>(offset));
  QueueFile(f);
}

void PollLoop::Write(int fd, const void* buffer, uint32_t length, uint64_t offset, ReactorOp* op) {
  FileOp* f = TakeFileOp(op);
  io_prep_pwrite(&f->cb, fd, const_cast<void*>(buffer), length, static_cast<long long>(offset));
  QueueFile(f);
}

void PollLoop::Fsync(int fd, ReactorOp* op) {
  FileOp* f = TakeFileOp(op);
  io_prep_fdsync(&f->cb, fd);
  QueueFile(f);
}

// The libaio context, made on first use. Where none can be had (the
// system's fs.aio-max-nr reached), the file I/O runs here, synchronously:
// slower, never wrong.
bool PollLoop::StartAio() {
  if (aio_ != nullptr) return true;
  if (aio_refused_) return false;
  if (int rc = io_setup(kAioDepth, &aio_); rc < 0) {
    aio_ = nullptr;
    aio_refused_ = true;
    std::fprintf(stderr, "reactor: no libaio context (%s; fs.aio-max-nr reached?): this reactor's file I/O runs synchronously\n",
                 std::strerror(-rc));
    return false;
  }
  return true;
}

int PollLoop::RunInline(const iocb& cb) {
  ssize_t n;
  switch (cb.aio_lio_opcode) {
    case IO_CMD_PREAD: n = pread(cb.aio_fildes, cb.u.c.buf, cb.u.c.nbytes, cb.u.c.offset); break;
    case IO_CMD_PWRITE: n = pwrite(cb.aio_fildes, cb.u.c.buf, cb.u.c.nbytes, cb.u.c.offset); break;
    default: n = fdatasync(cb.aio_fildes); break;
  }
  return n < 0 ? -errno : static_cast<int>(n);
}

void PollLoop::Submit() {
  if (queued_.empty()) return;
  if (!StartAio()) {
    for (iocb* cb : queued_) {
      auto* f = static_cast<FileOp*>(cb->data);
      AnswerLater(f, RunInline(f->cb));
    }
    queued_.clear();
    return;
  }
  size_t done = 0;
  while (done < queued_.size()) {
    int rc = io_submit(aio_, static_cast<long>(queued_.size() - done), queued_.data() + done);
    if (rc > 0) {
      done += static_cast<size_t>(rc);
      files_in_kernel_ += static_cast<uint64_t>(rc);
      continue;
    }
    if (rc == -EINTR) continue;
    // Full: the rest goes once some completes. Nothing in the kernel to
    // complete means it takes none for now: the first runs here instead,
    // as does an fdatasync on a file system without an asynchronous one
    // (libaio's is recent). Any other refusal is the request's error.
    const bool full = rc == -EAGAIN || rc == 0;
    if (full && files_in_kernel_ > 0) break;
    auto* f = static_cast<FileOp*>(queued_[done]->data);
    const bool no_async_sync = f->cb.aio_lio_opcode == IO_CMD_FDSYNC && rc == -EINVAL;
    AnswerLater(f, full || no_async_sync ? RunInline(f->cb) : rc);
    ++done;
  }
  queued_.erase(queued_.begin(), queued_.begin() + static_cast<std::ptrdiff_t>(done));
}

// A request that never reached the kernel, its result known: answered by
// the next Wait, never inside the call that started it.
void PollLoop::AnswerLater(FileOp* f, int result) {
  refused_.emplace_back(f->op, result);
  free_file_ops_.push_back(f);
}

void PollLoop::ReapFiles(std::vector<std::pair<ReactorOp*, int>>& completed) {
  uint64_t count;
  (void)!read(aio_fd_, &count, sizeof(count));  // non-blocking; the events tell
  while (files_in_kernel_ > 0) {
    timespec none{};
    int n = io_getevents(aio_, 0, static_cast<long>(events_.size()), events_.data(), &none);
    if (n == -EINTR) continue;
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) {
      auto* f = static_cast<FileOp*>(events_[i].data);
      // res holds the bytes moved or -errno (a long; transfers fit an int).
      completed.emplace_back(f->op, static_cast<int>(static_cast<long>(events_[i].res)));
      free_file_ops_.push_back(f);
    }
    files_in_kernel_ -= static_cast<uint64_t>(n);
  }
}

// ---- sockets, by readiness

PollLoop::SocketOps& PollLoop::ToTry(int fd) {
  SocketOps& ops = sockets_[fd];
  if (!ops.to_try) {
    ops.to_try = true;
    to_try_.push_back(fd);
  }
  return ops;
}

void PollLoop::Recv(int fd, void* buffer, uint32_t length, ReactorOp* op) {
  SocketOps& ops = ToTry(fd);
  ops.recv = op;
  ops.buffer = buffer;
  ops.length = length;
}

void PollLoop::SendMsg(int fd, const msghdr* msg, ReactorOp* op) {
  SocketOps& ops = ToTry(fd);
  ops.send = op;
  ops.msg = msg;
}

// Runs what the socket takes now; what would block waits for epoll.
void PollLoop::TrySocket(int fd, std::vector<std::pair<ReactorOp*, int>>& completed) {
  auto it = sockets_.find(fd);
  if (it == sockets_.end()) return;
  SocketOps& ops = it->second;
  ops.to_try = false;
  if (ops.recv != nullptr) {
    ssize_t n;
    do n = recv(fd, ops.buffer, ops.length, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n >= 0 || !Again(errno)) {
      completed.emplace_back(ops.recv, n >= 0 ? static_cast<int>(n) : -errno);
      ops.recv = nullptr;
    }
  }
  if (ops.send != nullptr) {
    ssize_t n;
    do n = sendmsg(fd, ops.msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n >= 0 || !Again(errno)) {
      completed.emplace_back(ops.send, n >= 0 ? static_cast<int>(n) : -errno);
      ops.send = nullptr;
    }
  }
  const uint32_t want = (ops.recv != nullptr ? EPOLLIN : 0u) | (ops.send != nullptr ? EPOLLOUT : 0u);
  Watch(fd, ops, want);
  if (want == 0) sockets_.erase(it);  // the owner may close the fd now
}

void PollLoop::Watch(int fd, SocketOps& ops, uint32_t events) {
  if (events == ops.watched) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  int op = events == 0 ? EPOLL_CTL_DEL : ops.watched == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  if (epoll_ctl(epoll_fd_, op, fd, &ev) < 0 && events != 0) {
    // Not a pollable descriptor (or no memory): answer with the error
    // rather than wait for ever.
    const int err = errno;
    if (ops.recv != nullptr) refused_.emplace_back(ops.recv, -err);
    if (ops.send != nullptr) refused_.emplace_back(ops.send, -err);
    ops.recv = ops.send = nullptr;
    events = 0;
  }
  ops.watched = events;
}

// ---- timers

void PollLoop::After(uint64_t nanoseconds, ReactorTimer* timer) {
  timers_.push({NowNs() + static_cast<int64_t>(nanoseconds), timer});
  ArmTimer();
}

void PollLoop::ArmTimer() {
  const int64_t at = timers_.empty() ? -1 : timers_.top().at_ns;
  if (at == armed_at_ns_) return;
  itimerspec spec{};
  if (at >= 0) {
    spec.it_value.tv_sec = at / 1000000000;
    spec.it_value.tv_nsec = at % 1000000000;
    if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;  // 0 disarms
  }
  timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
  armed_at_ns_ = at;
}

void PollLoop::ExpireTimers(std::vector<std::pair<ReactorOp*, int>>& completed) {
  uint64_t expirations;
  (void)!read(timer_fd_, &expirations, sizeof(expirations));  // non-blocking
  const int64_t now = NowNs();
  while (!timers_.empty() && timers_.top().at_ns <= now) {
    completed.emplace_back(timers_.top().timer, -ETIME);
    timers_.pop();
  }
  armed_at_ns_ = -1;  // fired or read: set again below
  ArmTimer();
}

// ---- the wait

void PollLoop::Wait(bool block, std::vector<std::pair<ReactorOp*, int>>& completed) {
  Submit();
  trying_.swap(to_try_);
  for (int fd : trying_) TrySocket(fd, completed);
  trying_.clear();
  if (!completed.empty() || !refused_.empty() || !to_try_.empty()) block = false;
  epoll_event events[64];
  int n = epoll_wait(epoll_fd_, events, 64, block ? -1 : 0);
  for (int i = 0; i < n; ++i) {
    const int fd = events[i].data.fd;
    if (fd == wake_fd_) {
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof(count));  // readable: does not block
    } else if (fd == aio_fd_) {
      ReapFiles(completed);
    } else if (fd == timer_fd_) {
      ExpireTimers(completed);
    } else {
      TrySocket(fd, completed);
    }
  }
  completed.insert(completed.end(), refused_.begin(), refused_.end());
  refused_.clear();
}

}  // namespace cachecore
