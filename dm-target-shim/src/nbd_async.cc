#include "nbd_async.h"

#include <sys/socket.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "cachecore/devices/block_device.h"
#include "nbd_protocol.h"
#include "shim/socket_io.h"
#include "shim/nbd_server.h"

namespace shim {

using namespace nbd;
using cachecore::AlignedBuffer;
using cachecore::Reactor;

namespace {
constexpr size_t kReceiveBuffer = 256 * 1024;
constexpr size_t kHeaderBytes = 28;
// Past these the session stops reading until replies have gone out: a
// client cannot make it hold more.
constexpr uint64_t kMaxTaken = 256;
constexpr uint64_t kMaxTakenBytes = 128ull << 20;
// Replies per sendmsg: two iovecs each (header, data) within IOV_MAX.
constexpr size_t kRepliesPerSend = IOV_MAX / 2;
// Buffers free requests keep for the next ones (reuse spares an allocation
// and its page faults); past this they are let go.
constexpr uint64_t kMaxKeptBytes = 16ull << 20;
// How soon a connection waiting for the server's buffer budget looks again.
constexpr uint64_t kBudgetRetryNanoseconds = 1'000'000;
}  // namespace

bool BufferBudget::TryTake(uint64_t bytes, uint64_t held) {
  uint64_t used = used_.load(std::memory_order_relaxed);
  const bool guaranteed = held == 0 && bytes <= kGuaranteedBytes;
  if (!guaranteed && held > 0 && held + bytes > limit_ / kShares) return false;
  do {
    if (!guaranteed && used + bytes > limit_) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

// One request from header to reply. Reused: its buffer keeps its capacity.
struct AsyncNbdRequest final : Completion, cachecore::ReactorTask {
  NbdAsyncSession* session = nullptr;
  uint16_t type = 0, flags = 0;
  uint64_t handle = 0, offset = 0;
  uint32_t length = 0;
  uint32_t received = 0;  // payload bytes in so far
  uint64_t budgeted = 0;  // bytes taken from the server's buffer budget
  uint64_t zeroed = 0;    // write zeroes: bytes asked of the backend so far
  bool flush_after = false;
  AlignedBuffer buffer;
  Status status;
  uint32_t error = 0;
  uint8_t head[16];

  bool fua() const { return flags & kCmdFlagFua; }
  uint64_t buffer_bytes() const { return type == kCmdRead || type == kCmdWrite ? length : 0; }
  // Any thread: back to the session's reactor.
  void Done(Status s) override {
    status = std::move(s);
    if (Reactor::Current() == session->reactor()) session->Completed(this);
    else session->reactor()->Post(this);
  }
  void Run() override { session->Completed(this); }
};

class NbdAsyncSession::RecvOp final : public cachecore::ReactorOp {
 public:
  explicit RecvOp(NbdAsyncSession* s) : s_(s) {}
  void OnComplete(int result) override { s_->Received(result); }

 private:
  NbdAsyncSession* s_;
};

class NbdAsyncSession::SendOp final : public cachecore::ReactorOp {
 public:
  explicit SendOp(NbdAsyncSession* s) : s_(s) {}
  void OnComplete(int result) override { s_->Sent(result); }

 private:
  NbdAsyncSession* s_;
};

// Sends what is queued once the round's completions have all replied.
class NbdAsyncSession::BudgetTimer final : public cachecore::ReactorTimer {
 public:
  explicit BudgetTimer(NbdAsyncSession* s) : s_(s) {}
  void OnComplete(int) override { s_->RetryBudget(); }

 private:
  NbdAsyncSession* s_;
};

class NbdAsyncSession::SendTask final : public cachecore::ReactorTask {
 public:
  explicit SendTask(NbdAsyncSession* s) : s_(s) {}
  void Run() override {
    s_->send_deferred_ = false;
    if (!s_->send_pending_ && !s_->queued_.empty()) s_->StartSend();
  }

 private:
  NbdAsyncSession* s_;
};

NbdAsyncSession::NbdAsyncSession(int fd, BlockBackend* backend, BufferBudget* budget)
    : fd_(fd), backend_(backend), budget_(budget), size_(backend->size()), recv_op_(new RecvOp(this)),
      send_op_(new SendOp(this)), send_task_(new SendTask(this)), in_(kReceiveBuffer),
      budget_timer_(new BudgetTimer(this)) {}

NbdAsyncSession::~NbdAsyncSession() = default;

Status NbdAsyncSession::Run() {
  Result<std::unique_ptr<Reactor>> reactor = Reactor::Create();
  if (!reactor.ok()) return reactor.status();
  reactor_ = std::move(reactor.value());
  struct Start final : cachecore::ReactorTask {
    NbdAsyncSession* s;
    void Run() override { s->Continue(); }
  } start;
  start.s = this;
  reactor_->Post(&start);
  reactor_->Run();
  return Status::Ok();
}

// ---- reading

void NbdAsyncSession::Continue() {
  while (!reading_ended_ && !receiving_) {
    if (skipping_ != nullptr) {  // an oversized write's payload: dropped as it comes
      size_t take = std::min<uint64_t>(in_end_ - in_begin_, skip_);
      in_begin_ += take;
      skip_ -= take;
      if (skip_ > 0) return ReceiveMore();
      AsyncNbdRequest* r = skipping_;
      skipping_ = nullptr;
      Reply(r, kEinval);
      continue;
    }
    if (filling_ != nullptr) {
      size_t take = std::min<size_t>(in_end_ - in_begin_, filling_->length - filling_->received);
      std::memcpy(filling_->buffer.data() + filling_->received, in_.data() + in_begin_, take);
      in_begin_ += take;
      filling_->received += static_cast<uint32_t>(take);
      if (filling_->received < filling_->length) return ReceivePayload();
      AsyncNbdRequest* r = filling_;
      filling_ = nullptr;
      Dispatch(r);
      continue;
    }
    if (Paused() || waiting_budget_) return;  // a reply's release, or the budget's timer, resumes it
    if (in_end_ - in_begin_ < kHeaderBytes) return ReceiveMore();
    if (!ParseRequest()) return EndReading();
  }
}

// Takes the header at in_begin_: a request to dispatch, or a write whose
// payload follows. False for a disconnect or a stream it cannot follow.
bool NbdAsyncSession::ParseRequest() {
  const uint8_t* h = in_.data() + in_begin_;
  if (GetBe32(h) != kRequestMagic) return false;
  uint16_t type = GetBe16(h + 6);
  uint32_t length = GetBe32(h + 24);
  if (type == kCmdDisc) return false;
  if (!TakeBudget(type, length)) return true;  // the header stays until there is room
  in_begin_ += kHeaderBytes;
  AsyncNbdRequest* r = NewRequest();
  r->budgeted = pending_budget_;
  pending_budget_ = 0;
  r->flags = GetBe16(h + 4);
  r->type = type;
  r->handle = GetBe64(h + 8);
  r->offset = GetBe64(h + 16);
  r->length = length;
  r->received = 0;
  const bool carries_data = type == kCmdWrite || type == kCmdRead;
  if (carries_data && length > kNbdMaxPayload) {  // more than advertised: EINVAL
    r->length = 0;  // no buffer; a read's reply carries no data
    if (type == kCmdRead) {
      Reply(r, kEinval);
    } else {
      skipping_ = r;
      skip_ = length;
    }
    return true;
  }
  taken_bytes_ += r->buffer_bytes();
  if (carries_data) r->buffer.Reserve(length);
  if (type == kCmdWrite) filling_ = r;
  else Dispatch(r);
  return true;
}

// The buffer of the request whose header is next, from the server's
// budget; false (and a timer set to look again) when there is no room.
bool NbdAsyncSession::TakeBudget(uint16_t type, uint32_t length) {
  const bool buffered = (type == kCmdWrite || type == kCmdRead) && length <= kNbdMaxPayload;
  if (!buffered || length == 0) return true;
  if (budget_->TryTake(length, taken_bytes_)) {
    pending_budget_ = length;
    return true;
  }
  waiting_budget_ = true;
  reactor_->After(kBudgetRetryNanoseconds, budget_timer_.get());
  return false;
}

void NbdAsyncSession::RetryBudget() {
  waiting_budget_ = false;
  Continue();
  MaybeFinish();
}

void NbdAsyncSession::ReceiveMore() {
  if (in_begin_ > 0) {  // keep the unparsed tail at the front
    std::memmove(in_.data(), in_.data() + in_begin_, in_end_ - in_begin_);
    in_end_ -= in_begin_;
    in_begin_ = 0;
  }
  receiving_ = true;
  receiving_payload_ = false;
  reactor_->Recv(fd_, in_.data() + in_end_, static_cast<uint32_t>(in_.size() - in_end_),
                 recv_op_.get());
}

// The rest of a write's payload goes straight into its buffer: no copy.
void NbdAsyncSession::ReceivePayload() {
  receiving_ = true;
  receiving_payload_ = true;
  reactor_->Recv(fd_, filling_->buffer.data() + filling_->received,
                 filling_->length - filling_->received, recv_op_.get());
}

void NbdAsyncSession::Received(int result) {
  receiving_ = false;
  if (result <= 0) return EndReading();  // EOF, the client gone, or Interrupt()
  if (receiving_payload_) filling_->received += static_cast<uint32_t>(result);
  else in_end_ += static_cast<size_t>(result);
  Continue();
}

void NbdAsyncSession::EndReading() {
  reading_ended_ = true;
  for (AsyncNbdRequest** r : {&filling_, &skipping_}) {
    if (*r != nullptr) {  // the client went away mid-request: nothing of it is written
      Release(*r);
      *r = nullptr;
    }
  }
  MaybeFinish();
}

// ---- running

void NbdAsyncSession::Dispatch(AsyncNbdRequest* r) {
  bool known = r->type == kCmdRead || r->type == kCmdWrite || r->type == kCmdFlush ||
               r->type == kCmdTrim || r->type == kCmdWriteZeroes;
  uint32_t error = known ? CheckNbdRange(r->type, r->offset, r->length, size_) : kEinval;
  if (error != 0) return Reply(r, error);
  r->zeroed = 0;
  r->flush_after = false;
  switch (r->type) {
    case kCmdRead: return backend_->ReadAsync(r->offset, r->buffer.data(), r->length, r);
    case kCmdWrite: return backend_->WriteAsync(r->offset, r->buffer.data(), r->length, r->fua(), r);
    case kCmdFlush: return backend_->FlushAsync(r);
    case kCmdTrim:
      r->flush_after = r->fua();
      return backend_->TrimAsync(r->offset, r->length, r);
    default: return NextZeroChunk(r);
  }
}

// Write zeroes in chunks from the shared zero buffer, one after another;
// only the last carries FUA (it makes the earlier ones durable too).
void NbdAsyncSession::NextZeroChunk(AsyncNbdRequest* r) {
  WriteNextZeroChunk(*backend_, r->offset, r->length, r->fua(), &r->zeroed, r);
}

void NbdAsyncSession::Completed(AsyncNbdRequest* r) {
  if (r->status.ok() && r->type == kCmdWriteZeroes && r->zeroed < r->length) {
    return NextZeroChunk(r);
  }
  if (r->status.ok() && r->flush_after) {  // a trim with FUA
    r->flush_after = false;
    return backend_->FlushAsync(r);
  }
  Reply(r, NbdErrorOf(ErrnoOf(r->status)));
}

// ---- answering

void NbdAsyncSession::Reply(AsyncNbdRequest* r, uint32_t error) {
  r->error = error;
  PutBe32(r->head, kSimpleReplyMagic);
  PutBe32(r->head + 4, error);
  PutBe64(r->head + 8, r->handle);
  queued_.push_back(r);
  // Not at once: the other requests completing in this round reply in the
  // same sendmsg.
  if (!send_pending_ && !send_deferred_) {
    send_deferred_ = true;
    reactor_->Defer(send_task_.get());
  }
}

void NbdAsyncSession::StartSend() {
  if (send_failed_) {  // the client is gone: nobody to answer
    for (AsyncNbdRequest* r : queued_) Release(r);
    queued_.clear();
    return MaybeFinish();
  }
  size_t n = std::min(queued_.size(), kRepliesPerSend);
  sending_.assign(queued_.begin(), queued_.begin() + static_cast<std::ptrdiff_t>(n));
  queued_.erase(queued_.begin(), queued_.begin() + static_cast<std::ptrdiff_t>(n));
  iov_.clear();
  for (AsyncNbdRequest* r : sending_) {
    iov_.push_back({r->head, sizeof(r->head)});
    if (r->type == kCmdRead && r->error == 0) iov_.push_back({r->buffer.data(), r->length});
  }
  iov_next_ = 0;
  msg_ = {};
  msg_.msg_iov = iov_.data();
  msg_.msg_iovlen = iov_.size();
  send_pending_ = true;
  reactor_->SendMsg(fd_, &msg_, send_op_.get());
}

void NbdAsyncSession::Sent(int result) {
  send_pending_ = false;
  if (result < 0) {
    // The client is gone. Nothing more is read (a receive in flight ends
    // with the shutdown; a session paused for replies would otherwise wait
    // for ever); what is taken still completes.
    send_failed_ = true;
    shutdown(fd_, SHUT_RDWR);
    if (!receiving_ && !reading_ended_) EndReading();
  } else {
    // A partial send: go on from where it stopped.
    for (auto left = static_cast<size_t>(result); left > 0;) {
      iovec& v = iov_[iov_next_];
      size_t take = std::min(left, v.iov_len);
      v.iov_base = static_cast<uint8_t*>(v.iov_base) + take;
      v.iov_len -= take;
      left -= take;
      if (v.iov_len == 0) ++iov_next_;
    }
    if (iov_next_ < iov_.size()) {
      msg_.msg_iov = iov_.data() + iov_next_;
      msg_.msg_iovlen = iov_.size() - iov_next_;
      send_pending_ = true;
      return reactor_->SendMsg(fd_, &msg_, send_op_.get());
    }
  }
  for (AsyncNbdRequest* r : sending_) Release(r);
  sending_.clear();
  if (!queued_.empty()) StartSend();
  Continue();  // reading may have paused for these
  MaybeFinish();
}

// ---- bookkeeping

AsyncNbdRequest* NbdAsyncSession::NewRequest() {
  if (free_.empty()) {
    requests_.push_back(std::make_unique<AsyncNbdRequest>());
    requests_.back()->session = this;
    free_.push_back(requests_.back().get());
  }
  AsyncNbdRequest* r = free_.back();
  free_.pop_back();
  kept_bytes_ -= r->buffer.size();
  ++taken_;
  return r;
}

void NbdAsyncSession::Release(AsyncNbdRequest* r) {
  --taken_;
  taken_bytes_ -= r->buffer_bytes();
  budget_->Give(r->budgeted);
  r->budgeted = 0;
  if (kept_bytes_ + r->buffer.size() > kMaxKeptBytes) r->buffer = AlignedBuffer();
  kept_bytes_ += r->buffer.size();
  free_.push_back(r);
}

bool NbdAsyncSession::Paused() const { return taken_ >= kMaxTaken || taken_bytes_ >= kMaxTakenBytes; }

void NbdAsyncSession::MaybeFinish() {
  if (reading_ended_ && !receiving_ && taken_ == 0 && !send_pending_ && !waiting_budget_) reactor_->Stop();
}

}  // namespace shim
