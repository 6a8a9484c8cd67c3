// One NBD connection past its handshake, served on a reactor of its own
// (cachecore/devices/reactor.h) over an asynchronous backend: requests are
// read from the socket in batches, handed to the backend's asynchronous
// calls (completed on this reactor, or posted back to it by the engine's
// record committer), and the replies that are ready go out together in one
// sendmsg. One
// thread for the whole connection, however many requests are in flight.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cachecore/devices/reactor.h"
#include "shim/block_backend.h"

namespace shim {

struct AsyncNbdRequest;

class NbdAsyncSession {
 public:
  NbdAsyncSession(int fd, BlockBackend* backend);
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
  // Reading: parse what the buffer holds, receive more when it runs out.
  void Continue();
  void Received(int result);
  void ReceiveMore();
  void ReceivePayload();
  bool ParseRequest();
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
  uint64_t size_;
  std::unique_ptr<cachecore::Reactor> reactor_;
  std::unique_ptr<RecvOp> recv_op_;
  std::unique_ptr<SendOp> send_op_;
  std::unique_ptr<SendTask> send_task_;
  bool send_deferred_ = false;  // send_task_ waits for the end of the round

  std::vector<uint8_t> in_;  // received, not yet parsed: [in_begin_, in_end_)
  size_t in_begin_ = 0, in_end_ = 0;
  AsyncNbdRequest* filling_ = nullptr;  // a write whose payload is arriving
  bool receiving_ = false, receiving_payload_ = false, reading_ended_ = false;

  std::vector<std::unique_ptr<AsyncNbdRequest>> requests_;  // all ever made
  std::vector<AsyncNbdRequest*> free_;
  uint64_t taken_ = 0;          // requests read and not yet released
  uint64_t taken_bytes_ = 0;    // their payload and read buffers

  std::vector<AsyncNbdRequest*> queued_, sending_;  // replies
  std::vector<iovec> iov_;
  size_t iov_next_ = 0;  // first iovec of sending_ not yet sent whole
  msghdr msg_{};
  bool send_pending_ = false, send_failed_ = false;
};

}  // namespace shim
