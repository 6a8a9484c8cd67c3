// One NBD connection past its handshake, served on a reactor of its own
// (cachecore/devices/reactor.h) over an asynchronous backend: requests are
// read from the socket in batches, handed to the backend's asynchronous
// calls (completed on this reactor, or posted back to it by the engine's
// record committer), and the replies that are ready go out together in one
// sendmsg. One
// thread for the whole connection, however many requests are in flight.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "cachecore/devices/reactor.h"
#include "shim/block_backend.h"

namespace shim {

struct AsyncNbdRequest;

// Request buffers of every connection of one server against one limit
// (NbdServerOptions::buffer_bytes). Thread-safe.
class BufferBudget {
 public:
  // Within this a connection that holds no buffer may always take one.
  static constexpr uint64_t kGuaranteedBytes = 1 << 20;
  // A connection that holds something already holds at most 1/kShares of
  // the limit (its first request may be larger: it must be served).
  static constexpr uint64_t kShares = 4;
  explicit BufferBudget(uint64_t limit) : limit_(limit) {}
  // Takes `bytes` for a connection that holds `held` bytes already: within
  // the limit and the connection's share, or past them when held is 0 and
  // bytes <= kGuaranteedBytes.
  bool TryTake(uint64_t bytes, uint64_t held);
  void Give(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

class NbdAsyncSession {
 public:
  // `budget` (not owned) must outlive the session.
  NbdAsyncSession(int fd, BlockBackend* backend, BufferBudget* budget);
  ~NbdAsyncSession();

  // Serves until the connection ends (a disconnect, EOF, an error, a stream
  // it cannot follow) and every request taken has been answered or its
  // client is gone. Fails, having read nothing, when no reactor can be set
  // up (the caller serves the connection another way then).
  Status Run();

  // A request's completion (AsyncNbdRequest::Done), on the reactor's thread.
  void Completed(AsyncNbdRequest* r);
  cachecore::Reactor* reactor() const { return reactor_.get(); }

 private:
  class RecvOp;
  class SendOp;
  class SendTask;
  class BudgetTimer;
  // Reading: parse what the buffer holds, receive more when it runs out.
  void Continue();
  void Received(int result);
  void ReceiveMore();
  void ReceivePayload();
  bool ParseRequest();
  bool TakeBudget(uint16_t type, uint32_t length);
  void RetryBudget();
  void EndReading();
  // Running and answering.
  void Dispatch(AsyncNbdRequest* r);
  void NextZeroChunk(AsyncNbdRequest* r);
  void Reply(AsyncNbdRequest* r, uint32_t error);
  void StartSend();
  void Sent(int result);
  AsyncNbdRequest* NewRequest();
  void Release(AsyncNbdRequest* r);
  bool Paused() const;
  void MaybeFinish();

  int fd_;
  BlockBackend* backend_;
  BufferBudget* budget_;
  uint64_t size_;
  std::unique_ptr<cachecore::Reactor> reactor_;
  std::unique_ptr<RecvOp> recv_op_;
  std::unique_ptr<SendOp> send_op_;
  std::unique_ptr<SendTask> send_task_;
  bool send_deferred_ = false;  // send_task_ waits for the end of the round

  std::vector<uint8_t> in_;  // received, not yet parsed: [in_begin_, in_end_)
  size_t in_begin_ = 0, in_end_ = 0;
  AsyncNbdRequest* filling_ = nullptr;  // a write whose payload is arriving
  AsyncNbdRequest* skipping_ = nullptr;  // an oversized write whose payload is dropped
  uint64_t skip_ = 0;                    // its payload bytes still to drop
  std::unique_ptr<BudgetTimer> budget_timer_;
  bool waiting_budget_ = false;  // a request waits for the server's buffer budget
  uint64_t pending_budget_ = 0;  // taken for the header being parsed
  bool receiving_ = false, receiving_payload_ = false, reading_ended_ = false;

  std::vector<std::unique_ptr<AsyncNbdRequest>> requests_;  // all ever made
  std::vector<AsyncNbdRequest*> free_;
  uint64_t taken_ = 0;          // requests read and not yet released
  uint64_t taken_bytes_ = 0;    // their payload and read buffers
  uint64_t kept_bytes_ = 0;     // buffers kept by free requests, for reuse

  std::vector<AsyncNbdRequest*> queued_, sending_;  // replies
  std::vector<iovec> iov_;
  size_t iov_next_ = 0;  // first iovec of sending_ not yet sent whole
  msghdr msg_{};
  bool send_pending_ = false, send_failed_ = false;
};

}  // namespace shim
