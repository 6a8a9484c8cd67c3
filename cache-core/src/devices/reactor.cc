#include "cachecore/devices/reactor.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "base/thread_annotations.h"
#include "devices/reactor_poll.h"

namespace cachecore {

namespace {
thread_local Reactor* current_reactor = nullptr;
constexpr unsigned kCompletionEntries = 16384;
}  // namespace

// The eventfd read that wakes Run() for posted tasks and Stop(). Not
// counted in flight: it is always armed, and dies with the ring.
struct WakeOp final : ReactorOp {
  void OnComplete(int) override {}
};

struct Reactor::State {
  io_uring ring{};
  bool ring_ready = false;
  std::unique_ptr<PollLoop> poll;  // instead of the ring, where it cannot be had
  bool commands = false;  // entries of 128 bytes (IORING_SETUP_SQE128)
  int event_fd = -1;
  uint64_t wake_buffer = 0;  // what the eventfd read fills
  WakeOp waker;
  bool rearm_waker = false;  // the waker's completion was set aside (Stash)
  bool waker_armed = false;  // its read is on the ring (it stays there between runs)
  // Completions taken off a full completion queue while submitting (Stash),
  // run by Run() before the next ones.
  std::vector<std::pair<ReactorOp*, int>> stashed;
  std::vector<ReactorTask*> deferred, deferred_running;  // the reactor's thread only
  std::atomic<bool> stop{false};
  Mutex posted_mu;
  ReactorTask* posted GUARDED_BY(posted_mu) = nullptr;  // newest first
  bool wake_pending GUARDED_BY(posted_mu) = false;      // an eventfd write is on its way
  ~State() {
    // A poster may still be inside Post(), past linking its task: it holds
    // the mutex until its wake-up is written, so wait for it.
    { MutexLock lock(posted_mu); }
    if (ring_ready) io_uring_queue_exit(&ring);
    poll.reset();  // before the eventfd it watches
    if (event_fd >= 0) close(event_fd);
  }
  void Wake() {
    uint64_t one = 1;
    // Only fails when the counter would overflow: then a wake is pending anyway.
    (void)!write(event_fd, &one, sizeof(one));
  }
};

bool Reactor::UsesIoUring() {
  static const bool uses = [] {
    const char* setting = std::getenv("CACHECTL_IO_URING");
    if (setting != nullptr && std::strcmp(setting, "off") == 0) return false;
    io_uring probe;
    if (io_uring_queue_init(2, &probe, 0) != 0) return false;
    io_uring_queue_exit(&probe);
    return true;
  }();
  return uses;
}

Result<std::unique_ptr<Reactor>> Reactor::Create(unsigned entries, bool commands) {
  auto state = std::make_unique<State>();
  state->commands = commands;
  if (!UsesIoUring()) return CreatePolling(std::move(state));
  const unsigned base_flags = IORING_SETUP_CQSIZE | (commands ? IORING_SETUP_SQE128 : 0);
  io_uring_params params{};
  // Completions' task work runs when the reactor enters the kernel anyway,
  // instead of interrupting it (Linux 5.19; older kernels get a plain ring).
  params.flags = base_flags | IORING_SETUP_COOP_TASKRUN;
  // Room for many completions: every operation in flight may complete at
  // once (a hit of 1 MiB over 4 KiB lines is up to 256 reads).
  params.cq_entries = kCompletionEntries;
  int rc = io_uring_queue_init_params(entries, &state->ring, &params);
  if (rc == -EINVAL) {
    params = {};
    params.flags = base_flags;
    params.cq_entries = kCompletionEntries;
    rc = io_uring_queue_init_params(entries, &state->ring, &params);
  }
  if (rc < 0 && !commands) {
    // This ring cannot be had (no memory, the locked-memory limit, no
    // descriptor left) although a small one could: epoll and libaio serve
    // the same operations.
    return CreatePolling(std::move(state));
  }
  if (rc < 0) return Status::IoError(std::string("io_uring_queue_init: ") + std::strerror(-rc));
  state->ring_ready = true;
  state->event_fd = eventfd(0, EFD_CLOEXEC);
  if (state->event_fd < 0) return Status::IoError(std::string("eventfd: ") + std::strerror(errno));
  return std::unique_ptr<Reactor>(new Reactor(std::move(state)));
}

Result<std::unique_ptr<Reactor>> Reactor::CreatePolling(std::unique_ptr<State> state) {
  if (state->commands) return Status::NotSupported("driver commands need io_uring, which cannot be used here");
  state->event_fd = eventfd(0, EFD_CLOEXEC);
  if (state->event_fd < 0) return Status::IoError(std::string("eventfd: ") + std::strerror(errno));
  Result<std::unique_ptr<PollLoop>> poll = PollLoop::Create(state->event_fd);
  if (!poll.ok()) return poll.status();
  state->poll = std::move(poll.value());
  return std::unique_ptr<Reactor>(new Reactor(std::move(state)));
}

Reactor::Reactor(std::unique_ptr<State> state) : state_(std::move(state)) {}

Reactor::~Reactor() = default;

Reactor* Reactor::Current() { return current_reactor; }

io_uring_sqe* Reactor::NextSqe() {
  while (true) {
    if (io_uring_sqe* sqe = io_uring_get_sqe(&state_->ring)) return sqe;
    Submit();  // full: hand what is queued to the kernel, then try again
  }
}

void Reactor::Stash() {
  io_uring_cqe* cqe;
  while (io_uring_peek_cqe(&state_->ring, &cqe) == 0) {
    auto* op = static_cast<ReactorOp*>(io_uring_cqe_get_data(cqe));
    if (op == &state_->waker) {
      state_->waker_armed = false;
      state_->rearm_waker = true;
    }
    else state_->stashed.emplace_back(op, cqe->res);
    io_uring_cqe_seen(&state_->ring, cqe);
  }
}

void Reactor::Prepared(io_uring_sqe* sqe, ReactorOp* op) {
  io_uring_sqe_set_data(sqe, op);
  ++in_flight_;
}

void Reactor::Read(int fd, void* buffer, uint32_t length, uint64_t offset, ReactorOp* op) {
  if (state_->poll) {
    ++in_flight_;
    return state_->poll->Read(fd, buffer, length, offset, op);
  }
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_read(sqe, fd, buffer, length, offset);
  Prepared(sqe, op);
}

void Reactor::Write(int fd, const void* buffer, uint32_t length, uint64_t offset, ReactorOp* op) {
  if (state_->poll) {
    ++in_flight_;
    return state_->poll->Write(fd, buffer, length, offset, op);
  }
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_write(sqe, fd, buffer, length, offset);
  Prepared(sqe, op);
}

void Reactor::Recv(int fd, void* buffer, uint32_t length, ReactorOp* op) {
  if (state_->poll) {
    ++in_flight_;
    return state_->poll->Recv(fd, buffer, length, op);
  }
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_recv(sqe, fd, buffer, length, 0);
  Prepared(sqe, op);
}

void Reactor::SendMsg(int fd, const msghdr* msg, ReactorOp* op) {
  if (state_->poll) {
    ++in_flight_;
    return state_->poll->SendMsg(fd, msg, op);
  }
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_sendmsg(sqe, fd, msg, MSG_NOSIGNAL);
  Prepared(sqe, op);
}

void Reactor::Fsync(int fd, ReactorOp* op) {
  if (state_->poll) {
    ++in_flight_;
    return state_->poll->Fsync(fd, op);
  }
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
  Prepared(sqe, op);
}

void Reactor::After(uint64_t nanoseconds, ReactorTimer* timer) {
  if (state_->poll) {
    ++in_flight_;
    return state_->poll->After(nanoseconds, timer);
  }
  static_assert(sizeof(timer->timespec) == sizeof(__kernel_timespec));
  timer->timespec[0] = static_cast<int64_t>(nanoseconds / 1000000000);
  timer->timespec[1] = static_cast<int64_t>(nanoseconds % 1000000000);
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_timeout(sqe, reinterpret_cast<__kernel_timespec*>(timer->timespec), 0, 0);
  Prepared(sqe, timer);
}

void Reactor::Command(int fd, uint32_t cmd_op, const void* payload, uint32_t length,
                      ReactorOp* op) {
  constexpr uint32_t kPayloadRoom = 2 * sizeof(io_uring_sqe) - offsetof(io_uring_sqe, cmd);
  if (!state_->commands || length > kPayloadRoom) {
    // A programming error: the entry could not hold the command.
    std::fprintf(stderr, "reactor: a %u-byte command on a ring without room for it\n", length);
    std::abort();
  }
  io_uring_sqe* sqe = NextSqe();
  std::memset(static_cast<void*>(sqe), 0, 2 * sizeof(io_uring_sqe));
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd;
  sqe->cmd_op = cmd_op;
  std::memcpy(sqe->cmd, payload, length);
  Prepared(sqe, op);
}

void Reactor::Submit() {
  if (state_->poll) return state_->poll->Submit();
  while (true) {
    int rc = io_uring_submit(&state_->ring);
    if (rc != -EBUSY && rc != -EAGAIN) return;  // other errors come back from the wait in Run()
    // The kernel refuses while its completion queue overflows: take the
    // completions off (to run later, not here, inside someone's
    // submission) and try again.
    Stash();
  }
}

void Reactor::Post(ReactorTask* task) {
  // The wake-up is written under the mutex: once the reactor has run this
  // task, its owner may destroy the reactor, and ~State waits for the mutex.
  MutexLock lock(state_->posted_mu);
  task->next_ = state_->posted;
  state_->posted = task;
  if (!state_->wake_pending) state_->Wake();
  state_->wake_pending = true;
}

void Reactor::Defer(ReactorTask* task) { state_->deferred.push_back(task); }

void Reactor::RunDeferred() {
  // Tasks may defer more: those run in the next round.
  state_->deferred_running.swap(state_->deferred);
  for (ReactorTask* task : state_->deferred_running) task->Run();
  state_->deferred_running.clear();
}

void Reactor::Stop() {
  if (current_reactor == this) {
    state_->stop.store(true);  // seen before the loop next waits
    return;
  }
  MutexLock lock(state_->posted_mu);  // as Post: Run may return at once
  state_->stop.store(true);
  state_->Wake();
}

void Reactor::RunPosted() {
  ReactorTask* list;
  {
    MutexLock lock(state_->posted_mu);
    list = state_->posted;
    state_->posted = nullptr;
    state_->wake_pending = false;
  }
  // Oldest first: a poster's tasks run in the order posted.
  ReactorTask* ordered = nullptr;
  while (list != nullptr) {
    ReactorTask* next = list->next_;
    list->next_ = ordered;
    ordered = list;
    list = next;
  }
  while (ordered != nullptr) {
    ReactorTask* next = ordered->next_;
    ordered->Run();
    ordered = next;
  }
}

void Reactor::ArmWaker() {
  if (state_->waker_armed || state_->poll) return;  // the loop watches the eventfd itself
  state_->waker_armed = true;
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_read(sqe, state_->event_fd, &state_->wake_buffer, sizeof(state_->wake_buffer), 0);
  io_uring_sqe_set_data(sqe, &state_->waker);
}

void Reactor::RunStashed() {
  if (state_->rearm_waker) {
    state_->rearm_waker = false;
    ArmWaker();
  }
  std::vector<std::pair<ReactorOp*, int>> ready;
  ready.swap(state_->stashed);
  for (auto [op, result] : ready) {
    --in_flight_;
    op->OnComplete(result);
  }
}

void Reactor::Run() { RunWith(nullptr); }

void Reactor::RunWith(ReactorTask* first) {
  Reactor* outer = current_reactor;
  current_reactor = this;
  ArmWaker();
  if (first != nullptr) first->Run();
  while (true) {
    RunPosted();
    RunStashed();
    RunDeferred();
    if (state_->stop.load() && in_flight_ == 0 && state_->deferred.empty()) break;
    // Completions set aside or tasks deferred meanwhile run next round
    // without waiting.
    bool more = !state_->stashed.empty() || state_->rearm_waker || !state_->deferred.empty();
    if (state_->poll) {
      state_->poll->Wait(!more, state_->stashed);
      RunStashed();
      continue;
    }
    int rc = more ? io_uring_submit(&state_->ring) : io_uring_submit_and_wait(&state_->ring, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      // Nothing can be submitted or waited for: no operation will ever
      // complete. A reactor is useless then; say so loudly and stop.
      std::fprintf(stderr, "reactor: io_uring_submit_and_wait: %s\n", std::strerror(-rc));
      std::abort();
    }
    RunStashed();  // before the newer ones: completions in the order reported
    io_uring_cqe* cqe;
    while (io_uring_peek_cqe(&state_->ring, &cqe) == 0) {
      auto* op = static_cast<ReactorOp*>(io_uring_cqe_get_data(cqe));
      int result = cqe->res;
      io_uring_cqe_seen(&state_->ring, cqe);
      if (op == &state_->waker) {
        state_->waker_armed = false;
        ArmWaker();
        continue;
      }
      --in_flight_;
      op->OnComplete(result);
    }
  }
  state_->stop.store(false);  // run again, it serves until the next Stop()
  current_reactor = outer;
}

}  // namespace cachecore
