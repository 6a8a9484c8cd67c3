// Reactor: an event loop on one thread with an io_uring of its own (or,
// where io_uring cannot be used, epoll and libaio: UsesIoUring). Front
// ends run their sockets on it and the engine its devices' I/O (a device
// that can, UringDevice, submits on the reactor of the calling thread), so
// one thread keeps many requests in flight and sleeps only when all of them
// wait. Completions run on the reactor's thread, in the order the kernel
// reports them.
//
// Threads: Run() on one thread; Read/Write/Recv/SendMsg/Fsync only on that
// thread (from a completion or a posted task); Post and Stop from anywhere.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <memory>

#include "cachecore/base/status.h"

struct io_uring_sqe;  // liburing's; only reactor.cc sees the ring

namespace cachecore {

// What waits for one operation. The reactor calls OnComplete once, on its
// thread, with what the kernel returned (bytes moved, or -errno).
class ReactorOp {
 public:
  virtual void OnComplete(int result) = 0;

 protected:
  ~ReactorOp() = default;
};

// An operation that completes once a delay has passed (Reactor::After):
// OnComplete then runs with -ETIME. The delay stays here (in the layout
// of the kernel's timespec) until then.
class ReactorTimer : public ReactorOp {
 public:
  int64_t timespec[2] = {0, 0};  // seconds, nanoseconds

 protected:
  ~ReactorTimer() = default;
};

// Work handed to the reactor from another thread. Intrusive (the reactor
// links it): posting allocates nothing. The poster owns it; it must stay
// until Run() has been called.
class ReactorTask {
 public:
  virtual void Run() = 0;

 protected:
  ~ReactorTask() = default;

 private:
  friend class Reactor;
  ReactorTask* next_ = nullptr;
};

class Reactor {
 public:
  // `entries`: submission queue size (a power of two); more operations may
  // be in flight, the queue only holds those not yet handed to the kernel.
  // `commands`: entries of 128 bytes, room for Command()'s payload (a ublk
  // queue's FETCH and COMMIT go on the ring its I/O uses).
  // Without io_uring: `entries` is ignored and `commands` refused.
  static Result<std::unique_ptr<Reactor>> Create(unsigned entries = 256, bool commands = false);
  // Whether reactors run on io_uring. False where io_uring_setup is refused
  // (a kernel without it, a container's seccomp profile) or the environment
  // says CACHECTL_IO_URING=off (to run the fallback where io_uring works):
  // then a reactor waits in epoll, its file I/O goes through libaio and its
  // socket operations are non-blocking calls once the socket is ready. The
  // same operations, completing the same way, either way.
  static bool UsesIoUring();
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  // The reactor whose Run() is on this thread, or nullptr.
  static Reactor* Current();

  // Operations (this reactor's thread only). Buffers, `msg` and `op` must
  // stay until op->OnComplete. Offsets are file offsets; Recv and SendMsg
  // are on sockets (MSG_NOSIGNAL: a closed peer is an error, not a signal).
  void Read(int fd, void* buffer, uint32_t length, uint64_t offset, ReactorOp* op);
  void Write(int fd, const void* buffer, uint32_t length, uint64_t offset, ReactorOp* op);
  void Recv(int fd, void* buffer, uint32_t length, ReactorOp* op);
  void SendMsg(int fd, const msghdr* msg, ReactorOp* op);
  void Fsync(int fd, ReactorOp* op);  // fdatasync
  // Completes `timer` after `nanoseconds` (a timeout on the ring: nothing
  // waits on a thread meanwhile).
  void After(uint64_t nanoseconds, ReactorTimer* timer);
  // A driver command (IORING_OP_URING_CMD) on `fd`: `cmd_op` and up to 80
  // bytes of `payload`, copied. Only on a reactor created with `commands`.
  void Command(int fd, uint32_t cmd_op, const void* payload, uint32_t length, ReactorOp* op);

  // This reactor's thread only: hands the operations prepared so far to
  // the kernel now, rather than when the reactor next waits (a driver
  // command is then in the kernel's hands when this returns).
  void Submit();
  // This reactor's thread only: runs task->Run() once the completions and
  // posted tasks at hand have run, before the reactor submits and waits
  // again (a session sends the replies of a whole round together). No lock,
  // no wake-up: the task must not be deferred twice before it ran.
  void Defer(ReactorTask* task);
  // Any thread: runs task->Run() on the reactor's thread, soon. The poster
  // makes sure Run() is still going to run it (a task posted after Run()
  // returned never runs): a session counts its requests until they are
  // answered, and stops only then.
  void Post(ReactorTask* task);
  // Serves completions and posted tasks until Stop() was called and no
  // operation is in flight (their buffers are then free to go).
  void Run();
  // As Run(), `first->Run()` on this thread before anything else; the
  // reactor may be run again afterwards (Stop() is forgotten once it
  // returns). For a caller that waits on its own thread for requests it
  // submits (the engine's synchronous calls): their completion calls
  // Stop(). May be called while another reactor runs on this thread (that
  // one waits meanwhile).
  void RunWith(ReactorTask* first);
  // Any thread. On the reactor's own thread it only marks the loop to
  // end: nothing needs waking.
  void Stop();
  // Operations submitted and not yet completed (this reactor's thread).
  uint64_t in_flight() const { return in_flight_; }

 private:
  struct State;  // reactor.cc: the ring, the waker, the posted tasks
  explicit Reactor(std::unique_ptr<State> state);
  static Result<std::unique_ptr<Reactor>> CreatePolling(std::unique_ptr<State> state);
  io_uring_sqe* NextSqe();
  void Prepared(io_uring_sqe* sqe, ReactorOp* op);
  void RunPosted();
  void ArmWaker();
  void Stash();
  void RunStashed();
  void RunDeferred();
  std::unique_ptr<State> state_;
  uint64_t in_flight_ = 0;
};

}  // namespace cachecore
