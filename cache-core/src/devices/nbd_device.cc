#include "cachecore/devices/nbd_device.h"

#include <libnbd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace cachecore {

namespace {

constexpr uint64_t kMaxRequest = 32 << 20;  // what NBD servers accept at least

Status LastError(const std::string& what) {
  const char* msg = nbd_get_error();
  return Status::IoError(what + ": " + (msg ? msg : "unknown NBD error"));
}

// One connection: a libnbd handle and the thread that drives it. Callers
// queue commands on the handle from any thread (libnbd locks it); the poller
// alone waits on the socket, reads the replies and so runs the completion
// callbacks. An eventfd wakes it when a caller has queued a command, since
// the poller may be waiting for replies only while the new command still
// needs the socket to become writable.
class Connection {
 public:
  static Result<std::unique_ptr<Connection>> Open(const std::string& uri);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  nbd_handle* handle() { return h_; }
  // Commands queued and not yet retired: what picking the least loaded reads.
  std::atomic<uint32_t> queued{0};

  // Wakes the poller to look at the direction libnbd wants again.
  void Kick();
  // Whether libnbd has given up on the connection (dead, or closed by the
  // server): commands then fail at once, and those in flight have failed.
  bool Gone() { return nbd_aio_is_dead(h_) == 1 || nbd_aio_is_closed(h_) == 1; }
  // Keeps the first reason the connection was lost, for the messages.
  void NoteLoss(const char* why);
  // "NBD connection to URI lost: why".
  Status Lost(const char* why = nullptr);

 private:
  Connection(std::string uri, nbd_handle* h, int wake_fd)
      : uri_(std::move(uri)), h_(h), wake_fd_(wake_fd), poller_([this] { Poll(); }) {}
  void Poll();
  int Notify(short revents);

  const std::string uri_;
  nbd_handle* const h_;
  const int wake_fd_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string why_;     // guarded by mu_
  std::thread poller_;  // last: starts once the members it uses exist
};

Result<std::unique_ptr<Connection>> Connection::Open(const std::string& uri) {
  nbd_handle* h = nbd_create();
  if (!h) return LastError("nbd_create");
  if (nbd_connect_uri(h, uri.c_str()) < 0) {
    Status s = Status::NotFound("cannot connect to " + uri + ": " +
                                (nbd_get_error() ? nbd_get_error() : "unknown error"));
    nbd_close(h);
    return s;
  }
  int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    nbd_close(h);
    return Status::IoError(std::string("eventfd: ") + strerror(errno));
  }
  return std::unique_ptr<Connection>(new Connection(uri, h, wake));
}

// Runs when no caller is left (the device is being destroyed): nothing is
// in flight, so after the join no callback can run.
Connection::~Connection() {
  stop_ = true;
  Kick();
  poller_.join();
  if (!Gone()) nbd_shutdown(h_, 0);  // a polite disconnect; failure changes nothing
  nbd_close(h_);
  close(wake_fd_);
}

void Connection::Kick() {
  uint64_t one = 1;
  // Fails only when the counter is full, and then the poller wakes anyway.
  (void)!write(wake_fd_, &one, sizeof one);
}

void Connection::NoteLoss(const char* why) {
  std::lock_guard lock(mu_);
  if (why_.empty() && why && *why) why_ = why;
}

Status Connection::Lost(const char* why) {
  NoteLoss(why);
  std::lock_guard lock(mu_);
  return Status::IoError("NBD connection to " + uri_ +
                         " lost: " + (why_.empty() ? "the server closed the connection" : why_));
}

// Until the destructor stops it or the connection is gone (libnbd then has
// failed every command in flight, so no caller waits on this thread).
void Connection::Poll() {
  while (!stop_) {
    if (Gone()) return;
    // The socket only when libnbd wants it: with direction 0 poll() would
    // still report a hang-up at once, again and again.
    unsigned dir = nbd_aio_get_direction(h_);
    int fd = dir != 0 ? nbd_aio_get_fd(h_) : -1;
    short events = ((dir & LIBNBD_AIO_DIRECTION_READ) ? POLLIN : 0) |
                   ((dir & LIBNBD_AIO_DIRECTION_WRITE) ? POLLOUT : 0);
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {fd, events, 0}};
    if (poll(fds, fd >= 0 ? 2 : 1, -1) < 0) continue;  // EINTR, or ENOMEM: try again
    if (fds[0].revents & POLLIN) {
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof count);
    }
    if (fd >= 0 && fds[1].revents != 0 && Notify(fds[1].revents) < 0) {
      NoteLoss(nbd_get_error());  // libnbd moved to dead; the loop ends above
    }
  }
}

// Tells libnbd what the socket can do now; the direction is read again
// since a caller may have changed it while this thread slept.
int Connection::Notify(short revents) {
  unsigned dir = nbd_aio_get_direction(h_);
  if ((dir & LIBNBD_AIO_DIRECTION_READ) && (revents & (POLLIN | POLLHUP | POLLERR))) {
    return nbd_aio_notify_read(h_);  // before writing: a reply may change what to write
  }
  if ((dir & LIBNBD_AIO_DIRECTION_WRITE) && (revents & (POLLOUT | POLLHUP | POLLERR))) {
    return nbd_aio_notify_write(h_);
  }
  return 0;  // POLLNVAL: the handle closed its socket; the loop sees it gone
}

// What one SubmitAndWait waits for: a count of commands not yet retired.
class Batch {
 public:
  void Add() {
    std::lock_guard lock(mu_);
    ++pending_;
  }
  void Done() {
    // Notified under the lock: the moment pending_ is zero the waiter may
    // return and free this Batch, so the notify must not come after unlock.
    std::lock_guard lock(mu_);
    if (--pending_ == 0) cv_.notify_all();
  }
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t pending_ = 0;  // guarded by mu_
};

// One NBD command: a request, or a 32 MiB piece of one.
struct Command {
  Batch* batch;
  IoRequest* request;
  Connection* connection;
  // Written by OnComplete, read after Batch::Wait. A command libnbd frees
  // without completing it (the handle closed under it) keeps ENOTCONN.
  int error = ENOTCONN;
};

int OnComplete(void* user_data, int* error) {
  auto* c = static_cast<Command*>(user_data);
  c->error = *error;
  // ENOTCONN: libnbd failing what was in flight on a connection that just
  // died; this thread's libnbd error says why.
  if (*error == ENOTCONN) c->connection->NoteLoss(nbd_get_error());
  return 1;  // libnbd retires the command
}

// libnbd's last use of a command, on every path (replied, failed at issue,
// aborted with the connection, or freed by nbd_close): the count-down here
// is what lets the caller free its commands.
void OnFree(void* user_data) {
  auto* c = static_cast<Command*>(user_data);
  c->connection->queued.fetch_sub(1, std::memory_order_relaxed);
  c->batch->Done();
}

// A request submitted on a reactor: one command, whose completion posts the
// request back to that reactor (no thread waits for it).
int OnCompleteAsync(void* user_data, int* error) {
  auto* io = static_cast<AsyncIo*>(user_data);
  auto* c = static_cast<Connection*>(io->device_state);
  io->answered = true;
  if (*error == 0) {
    io->request.status = Status::Ok();
  } else if (*error == ENOTCONN) {
    io->request.status = c->Lost(nbd_get_error());
  } else {
    io->request.status = Status::IoError("NBD server: " + std::string(strerror(*error)));
  }
  return 1;
}

void OnFreeAsync(void* user_data) {
  auto* io = static_cast<AsyncIo*>(user_data);
  auto* c = static_cast<Connection*>(io->device_state);
  // Freed unanswered: refused at issue (the caller then says why), or the
  // handle closed under it.
  if (!io->answered) io->request.status = c->Lost();
  c->queued.fetch_sub(1, std::memory_order_relaxed);
  io->reactor->Post(io);  // IoDone there (AsyncIo::Run)
}

// A command libnbd refused: the connection is lost, or the request is one
// libnbd will not send.
Status IssueError(Connection& c) {
  const char* msg = nbd_get_error();
  std::string why = msg ? msg : "unknown NBD error";  // before other libnbd calls
  return c.Gone() ? c.Lost(why.c_str()) : Status::IoError("NBD request: " + why);
}

class NbdDevice : public BlockDevice {
 public:
  NbdDevice(std::string uri, std::vector<std::unique_ptr<Connection>> connections, uint64_t size,
            bool trim, bool flush)
      : uri_(std::move(uri)),
        connections_(std::move(connections)),
        size_(size),
        trim_(trim),
        flush_(flush) {}

  uint64_t size_bytes() const override { return size_; }
  std::string identity() const override { return "nbd:" + uri_; }
  bool supports_discard() const override { return trim_; }

  Status SubmitAndWait(std::span<IoRequest> requests) override;
  // On a reactor: one command, completed there once the server replies.
  void Submit(AsyncIo& io) override;
  bool discards_without_waiting() const override { return true; }

 private:
  bool Skipped(const IoRequest& r) const {
    return (r.op == IoOp::kFlush && !flush_) || (r.op == IoOp::kDiscard && !trim_);
  }
  bool Check(std::span<IoRequest> requests) const;
  Connection* Pick();
  void Run(Connection& c, std::span<IoRequest> requests);
  static int64_t Issue(Command& c, uint64_t offset, uint64_t length);
  // Queues one command for [offset, offset+length) of `r` on `h`.
  static int64_t Issue(nbd_handle* h, IoRequest& r, uint64_t offset, uint64_t length,
                       nbd_completion_callback done);

  std::string uri_;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::atomic<uint32_t> next_{0};
  uint64_t size_;
  bool trim_, flush_;
};

// Checks every request and settles those that need no command; returns
// whether any is left to send.
bool NbdDevice::Check(std::span<IoRequest> requests) const {
  bool commands = false;
  for (IoRequest& r : requests) {
    r.status = CheckRequest(r);
    if (!r.status.ok()) continue;
    if (Skipped(r)) {
      // No flush: the server has no volatile cache to flush. No trim: the
      // caller learns that the data stays.
      if (r.op == IoOp::kDiscard) r.status = Status::NotSupported("the NBD server cannot trim");
      continue;
    }
    commands = true;
  }
  return commands;
}

// The least loaded live connection (the rotating start spreads ties), or
// nullptr when every one is lost. Several connections exist only when the
// server allows multi-conn, which is also what makes a flush on one cover
// writes completed on the others.
Connection* NbdDevice::Pick() {
  size_t n = connections_.size(), start = next_.fetch_add(1, std::memory_order_relaxed) % n;
  Connection* best = nullptr;
  for (size_t i = 0; i < n; ++i) {
    Connection* c = connections_[(start + i) % n].get();
    if (c->Gone()) continue;
    if (!best ||
        c->queued.load(std::memory_order_relaxed) < best->queued.load(std::memory_order_relaxed)) {
      best = c;
    }
  }
  return best;
}

Status NbdDevice::SubmitAndWait(std::span<IoRequest> requests) {
  if (Check(requests)) {
    if (Connection* c = Pick()) {
      Run(*c, requests);
    } else {
      Status lost = connections_.front()->Lost();
      for (IoRequest& r : requests) {
        if (r.status.ok() && !Skipped(r)) r.status = lost;
      }
    }
  }
  for (IoRequest& r : requests) {
    if (!r.status.ok()) return r.status;
  }
  return Status::Ok();
}

void NbdDevice::Submit(AsyncIo& io) {
  IoRequest& r = io.request;
  Reactor* reactor = Reactor::Current();
  const bool whole = r.op == IoOp::kFlush || r.length <= kMaxRequest;  // one command
  if (reactor == nullptr || !whole || !Check({&r, 1})) {
    // Off a reactor or in pieces: inline. Settled by Check: answered now.
    if (reactor == nullptr || !whole) return BlockDevice::Submit(io);
    return io.done->IoDone(io);
  }
  Connection* c = Pick();
  if (c == nullptr) {
    r.status = connections_.front()->Lost();
    return io.done->IoDone(io);
  }
  io.reactor = reactor;
  io.device_state = c;
  io.answered = false;
  c->queued.fetch_add(1, std::memory_order_relaxed);
  nbd_completion_callback done{.callback = OnCompleteAsync, .user_data = &io, .free = OnFreeAsync};
  // On failure libnbd has already called OnFreeAsync, whose post runs only
  // once this returns to the reactor: the status set here is what it sees.
  if (Issue(c->handle(), r, r.offset, r.length, done) < 0) r.status = IssueError(*c);
  c->Kick();
}

int64_t NbdDevice::Issue(Command& c, uint64_t offset, uint64_t length) {
  nbd_completion_callback done{.callback = OnComplete, .user_data = &c, .free = OnFree};
  return Issue(c.connection->handle(), *c.request, offset, length, done);
}

int64_t NbdDevice::Issue(nbd_handle* h, IoRequest& r, uint64_t offset, uint64_t length,
                         nbd_completion_callback done) {
  uint8_t* at = static_cast<uint8_t*>(r.buffer) + (offset - r.offset);
  switch (r.op) {
    case IoOp::kRead:
      return nbd_aio_pread(h, at, length, offset, done, 0);
    case IoOp::kWrite:
      return nbd_aio_pwrite(h, at, length, offset, done, 0);
    case IoOp::kFlush:
      return nbd_aio_flush(h, done, 0);
    case IoOp::kDiscard:
      return nbd_aio_trim(h, length, offset, done, 0);
  }
  assert(false && "unknown IoOp");
  return -1;
}

// Queues every command of the call on `c`, then sleeps until libnbd has
// let go of all of them. All of a call's commands share one connection, so
// a call never waits on two.
void NbdDevice::Run(Connection& c, std::span<IoRequest> requests) {
  Batch batch;
  // A deque: its elements never move, and libnbd holds pointers to them
  // until OnFree.
  std::deque<Command> issued;
  for (IoRequest& r : requests) {
    if (!r.status.ok() || Skipped(r)) continue;
    uint64_t end = r.op == IoOp::kFlush ? r.offset + 1 : r.offset + r.length;
    for (uint64_t at = r.offset; at < end; at += kMaxRequest) {
      Command& cmd = issued.emplace_back(Command{&batch, &r, &c});
      batch.Add();
      c.queued.fetch_add(1, std::memory_order_relaxed);
      // On failure libnbd has already called OnFree.
      if (Issue(cmd, at, std::min(kMaxRequest, end - at)) < 0) r.status = IssueError(c);
    }
  }
  c.Kick();
  batch.Wait();
  for (Command& cmd : issued) {
    if (cmd.error == 0 || !cmd.request->status.ok()) continue;
    cmd.request->status = cmd.error == ENOTCONN
                              ? c.Lost()
                              : Status::IoError("NBD server: " + std::string(strerror(cmd.error)));
  }
}

}  // namespace

bool IsNbdUri(const std::string& path) {
  for (const char* scheme : {"nbd://", "nbds://", "nbd+unix://", "nbds+unix://", "nbd+vsock://"}) {
    if (path.rfind(scheme, 0) == 0) return true;
  }
  return false;
}

Result<std::unique_ptr<BlockDevice>> OpenNbdDevice(const std::string& uri,
                                                   const NbdDeviceOptions& options) {
  if (!IsNbdUri(uri)) return Status::InvalidArgument("'" + uri + "' is not an NBD URI");
  Result<std::unique_ptr<Connection>> first = Connection::Open(uri);
  if (!first.ok()) return first.status();
  nbd_handle* h = first.value()->handle();
  int64_t size = nbd_get_size(h);
  if (size < 0 || size % 512 != 0) {
    return Status::InvalidArgument("the NBD export at " + uri +
                                   " has a size that is not a multiple of 512");
  }
  bool trim = nbd_can_trim(h) == 1, flush = nbd_can_flush(h) == 1;
  // Without multi-conn a flush on one connection need not cover writes on
  // another: then one connection carries everything.
  unsigned want = nbd_can_multi_conn(h) == 1 ? std::max(1u, options.connections) : 1;
  std::vector<std::unique_ptr<Connection>> connections;
  connections.push_back(std::move(first.value()));
  while (connections.size() < want) {
    Result<std::unique_ptr<Connection>> more = Connection::Open(uri);
    if (!more.ok()) break;  // fewer connections still work
    connections.push_back(std::move(more.value()));
  }
  return std::unique_ptr<BlockDevice>(
      new NbdDevice(uri, std::move(connections), static_cast<uint64_t>(size), trim, flush));
}

}  // namespace cachecore
