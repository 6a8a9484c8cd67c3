#include "nbd_connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "nbd_async.h"
#include "nbd_protocol.h"
#include "shim/socket_io.h"
#include "tls_session.h"

namespace shim {

using namespace nbd;
using cachecore::AlignedBuffer;

namespace {
constexpr uint32_t kMaxOptionLength = 64 * 1024;

}  // namespace

struct NbdRequest {
  uint16_t type = 0;
  uint16_t flags = 0;
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  bool oversized = false;  // a read or write past kNbdMaxPayload: EINVAL
  AlignedBuffer buffer;
};

NbdConnection::NbdConnection(int fd, BlockBackend* backend, const NbdServerOptions* options,
                             BufferBudget* budget, bool handshake, const NbdTls* tls, ExportResolver* exports)
    : fd_(fd), serve_fd_(fd), handshake_(handshake), tls_(tls), backend_(backend), exports_(exports),
      options_(options), budget_(budget) {}

NbdConnection::~NbdConnection() { close(fd_); }

void NbdConnection::Interrupt() { shutdown(fd_, SHUT_RDWR); }

namespace {
// Ends a handshake that is not over by its deadline, whatever the client
// does (says nothing, trickles bytes, asks for options without end, reads
// no reply): the socket is shut down under it, so its reads and writes fail.
class HandshakeDeadline {
 public:
  HandshakeDeadline(int fd, unsigned seconds)
      : watchdog_([this, fd, seconds] {
          std::unique_lock lock(mu_);
          if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return over_; })) {
            shutdown(fd, SHUT_RDWR);
          }
        }) {}
  ~HandshakeDeadline() {
    {
      std::lock_guard lock(mu_);
      over_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool over_ = false;
  std::thread watchdog_;  // last: it uses the members above
};
}  // namespace

void NbdConnection::Serve() {
  // The client sees the end as soon as the connection has ended, not when
  // the server next reaps it (up to a second later: clients that wait for
  // the server's close after NBD_CMD_DISC, as nbdcopy does, waited that
  // long). The fd itself is closed with the connection.
  struct ShutAtEnd {
    int fd;
    ~ShutAtEnd() { shutdown(fd, SHUT_RDWR); }
  } shut_at_end{fd_};
  if (handshake_) {
    // A client that does not finish its handshake must not hold its place
    // (a timeout of 0: no deadline).
    std::optional<HandshakeDeadline> deadline;
    if (options_->handshake_timeout_seconds > 0) deadline.emplace(fd_, options_->handshake_timeout_seconds);
    if (!Handshake()) return;
  }
  if (!tls_session_) return ServeTransmission();
  // Through TLS: the session serves one end of a socket pair, the relay
  // carries the other end's bytes to and from the client. Shutting the
  // client's socket (Interrupt) ends the relay, which ends the session.
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    std::fprintf(stderr, "nbd: TLS connection closed, no socket pair for it: %s\n", std::strerror(errno));
    return;
  }
  std::thread relay([this, &pair] { tls_session_->Relay(pair[0]); });
  serve_fd_ = pair[1];
  ServeTransmission();
  shutdown(pair[1], SHUT_RDWR);
  relay.join();
  close(pair[0]);
  close(pair[1]);
}

void NbdConnection::ServeTransmission() {
  // On a reactor when the backend can complete requests without blocking
  // (the engine); with serving threads when it cannot (a test's or the
  // bench's emulated disk). Without a reactor (no epoll or eventfd to be
  // had) the engine could serve nothing either: the connection ends.
  if (backend_->asynchronous()) {
    Status s = NbdAsyncSession(serve_fd_, backend_, budget_).Run();
    if (!s.ok()) std::fprintf(stderr, "nbd: connection closed, no reactor to serve it on: %s\n", s.ToString().c_str());
    return;
  }
  // Requests in flight finish before the connection goes (the threads are
  // joined): a client that vanished mid-write still gets its write
  // completed, whole.
  std::vector<std::thread> helpers;
  for (unsigned i = 1; i < std::max(1u, options_->worker_threads); ++i) {
    helpers.emplace_back([this] { ServeRequests(); });
  }
  ServeRequests();
  for (std::thread& t : helpers) t.join();
}

bool NbdConnection::Handshake() {
  uint8_t hello[18];
  PutBe64(hello, kInitMagic);
  PutBe64(hello + 8, kOptMagic);
  PutBe16(hello + 16, kFlagFixedNewstyle | kFlagNoZeroes);
  uint8_t client_flags[4];
  if (!WriteFull(fd_, hello, sizeof(hello)) || !ReadFull(fd_, client_flags, 4)) return false;
  uint32_t flags = GetBe32(client_flags);
  if (!(flags & kClientFixedNewstyle) || (flags & ~(kClientFixedNewstyle | kClientNoZeroes))) {
    return false;  // only fixed newstyle clients; unknown flags end it (as the spec says)
  }
  bool no_zeroes = flags & kClientNoZeroes;
  while (true) {
    uint8_t head[16];
    if (!HandshakeRead(head, sizeof(head)) || GetBe64(head) != kOptMagic) return false;
    uint32_t option = GetBe32(head + 8), length = GetBe32(head + 12);
    if (length > kMaxOptionLength) return false;
    std::vector<uint8_t> data(length);
    if (length > 0 && !HandshakeRead(data.data(), length)) return false;
    if (tls_ && !tls_session_ && option != kOptStartTls && option != kOptAbort) {
      // TLS first: EXPORT_NAME has no error reply, so it ends the connection.
      if (option == kOptExportName) return false;
      if (!SendOptionReply(option, kRepErrTlsReqd, nullptr, 0)) return false;
      continue;
    }
    if (option == kOptExportName) {
      if (!SelectExport(std::string(data.begin(), data.end()))) return false;
      uint8_t reply[10 + 124] = {};
      PutBe64(reply, backend_->size());
      PutBe16(reply + 8, TransmissionFlags());
      iovec iov = {reply, no_zeroes ? 10u : sizeof(reply)};
      return HandshakeWrite(&iov, 1);
    }
    bool go = false;
    if (!HandleOption(option, data, &go)) return false;
    if (go) return true;
  }
}

bool NbdConnection::HandleOption(uint32_t option, const std::vector<uint8_t>& data, bool* go) {
  switch (option) {
    case kOptAbort:
      SendOptionReply(option, kRepAck, nullptr, 0);
      return false;
    case kOptStartTls:
      if (!tls_) return SendOptionReply(option, kRepErrUnsup, nullptr, 0);
      return StartTls(option, data);
    case kOptList: {
      if (!data.empty()) return SendOptionReply(option, kRepErrInvalid, nullptr, 0);
      const std::vector<std::string> names =
          exports_ ? exports_->Names() : std::vector<std::string>{options_->export_name};
      for (const std::string& name : names) {
        std::vector<uint8_t> entry(4 + name.size());
        PutBe32(entry.data(), static_cast<uint32_t>(name.size()));
        std::memcpy(entry.data() + 4, name.data(), name.size());
        if (!SendOptionReply(option, kRepServer, entry.data(), static_cast<uint32_t>(entry.size()))) return false;
      }
      return SendOptionReply(option, kRepAck, nullptr, 0);
    }
    case kOptInfo:
    case kOptGo: {
      // u32 name length, name, u16 count of info requests, u16 each.
      if (data.size() < 6) return SendOptionReply(option, kRepErrInvalid, nullptr, 0);
      uint32_t name_len = GetBe32(data.data());
      if (name_len > data.size() - 6) return SendOptionReply(option, kRepErrInvalid, nullptr, 0);
      uint16_t requests = GetBe16(data.data() + 4 + name_len);
      if (data.size() != 6 + name_len + 2ull * requests) {
        return SendOptionReply(option, kRepErrInvalid, nullptr, 0);
      }
      std::string name(data.begin() + 4, data.begin() + 4 + name_len);
      if (!SelectExport(name)) return SendOptionReply(option, kRepErrUnknown, nullptr, 0);
      if (!SendExportInfo(option)) return false;
      *go = option == kOptGo;
      return true;
    }
    default:
      return SendOptionReply(option, kRepErrUnsup, nullptr, 0);
  }
}

bool NbdConnection::SendExportInfo(uint32_t option) {
  uint8_t exp[12];
  PutBe16(exp, kInfoExport);
  PutBe64(exp + 2, backend_->size());
  PutBe16(exp + 10, TransmissionFlags());
  uint8_t bs[14];
  PutBe16(bs, kInfoBlockSize);
  PutBe32(bs + 2, 512);
  PutBe32(bs + 6, backend_->preferred_block_size());
  PutBe32(bs + 10, kNbdMaxPayload);
  return SendOptionReply(option, kRepInfo, exp, sizeof(exp)) &&
         SendOptionReply(option, kRepInfo, bs, sizeof(bs)) &&
         SendOptionReply(option, kRepAck, nullptr, 0);
}

bool NbdConnection::SendOptionReply(uint32_t option, uint32_t type, const uint8_t* data,
                                    uint32_t len) {
  uint8_t head[20];
  PutBe64(head, kOptReplyMagic);
  PutBe32(head + 8, option);
  PutBe32(head + 12, type);
  PutBe32(head + 16, len);
  iovec iov[2] = {{head, sizeof(head)}, {const_cast<uint8_t*>(data), len}};
  return HandshakeWrite(iov, len > 0 ? 2 : 1);
}

bool NbdConnection::StartTls(uint32_t option, const std::vector<uint8_t>& data) {
  if (tls_session_ || !data.empty()) return SendOptionReply(option, kRepErrInvalid, nullptr, 0);
  if (!SendOptionReply(option, kRepAck, nullptr, 0)) return false;
  Result<std::unique_ptr<TlsSession>> session = TlsSession::Accept(*tls_, fd_);
  if (!session.ok()) {
    std::fprintf(stderr, "nbd: a TCP client was refused: %s\n", session.status().message().c_str());
    return false;
  }
  tls_session_ = std::move(session.value());
  return true;
}

bool NbdConnection::HandshakeRead(void* data, size_t len) {
  return tls_session_ ? tls_session_->ReadFull(data, len) : ReadFull(fd_, data, len);
}

bool NbdConnection::HandshakeWrite(const iovec* iov, int count) {
  if (!tls_session_) return WriteVecFull(fd_, const_cast<iovec*>(iov), count);
  for (int i = 0; i < count; ++i) {
    if (!tls_session_->WriteFull(iov[i].iov_base, iov[i].iov_len)) return false;
  }
  return true;
}

bool NbdConnection::SelectExport(const std::string& name) {
  if (exports_ == nullptr) return name.empty() || name == options_->export_name;
  BlockBackend* chosen = exports_->Resolve(name, this);
  if (chosen == nullptr) return false;
  backend_ = chosen;
  return true;
}

uint16_t NbdConnection::TransmissionFlags() const {
  return kTxHasFlags | kTxSendFlush | kTxSendFua | kTxSendTrim | kTxSendWriteZeroes |
         kTxCanMultiConn;
}

uint32_t NbdConnection::CheckRange(uint16_t type, uint64_t offset, uint32_t length) const {
  return CheckNbdRange(type, offset, length, backend_->size());
}

void NbdConnection::ServeRequests() {
  NbdRequest r;  // this thread's own: its buffer is reused, request after request
  while (ReadRequest(r)) {
    bool known = r.type == kCmdRead || r.type == kCmdWrite || r.type == kCmdFlush ||
                 r.type == kCmdTrim || r.type == kCmdWriteZeroes;
    uint32_t error = known && !r.oversized ? CheckRange(r.type, r.offset, r.length) : kEinval;
    if (error != 0) {
      Reply(r.handle, error, nullptr, 0);
      continue;
    }
    Execute(r);
  }
}

bool NbdConnection::ReadRequest(NbdRequest& r) {
  std::lock_guard lock(read_mu_);
  if (ended_) return false;
  uint8_t head[28];
  ended_ = true;  // until this request is read whole
  if (!ReadFull(serve_fd_, head, sizeof(head)) || GetBe32(head) != kRequestMagic) return false;
  r.flags = GetBe16(head + 4);
  r.type = GetBe16(head + 6);
  r.handle = GetBe64(head + 8);
  r.offset = GetBe64(head + 16);
  r.length = GetBe32(head + 24);
  if (r.type == kCmdDisc) return false;
  bool has_payload = r.type == kCmdWrite;
  bool carries_data = has_payload || r.type == kCmdRead;
  r.oversized = carries_data && r.length > kNbdMaxPayload;
  if (r.oversized && has_payload) {  // dropped as it comes, then answered EINVAL
    uint8_t scratch[64 * 1024];
    for (uint32_t left = r.length; left > 0;) {
      uint32_t n = std::min<uint32_t>(left, sizeof(scratch));
      if (!ReadFull(serve_fd_, scratch, n)) return false;
      left -= n;
    }
  } else if (has_payload) {
    r.buffer.Reserve(r.length);
    // The client went away mid-request: nothing of it is written.
    if (!ReadFull(serve_fd_, r.buffer.data(), r.length)) return false;
  }
  ended_ = false;
  return true;
}

void NbdConnection::Execute(NbdRequest& r) {
  bool fua = r.flags & kCmdFlagFua;
  Status s;
  switch (r.type) {
    case kCmdRead:
      r.buffer.Reserve(r.length);
      s = backend_->Read(r.offset, r.buffer.data(), r.length);
      break;
    case kCmdWrite:
      s = backend_->Write(r.offset, r.buffer.data(), r.length, fua);
      break;
    case kCmdFlush:
      s = backend_->Flush();
      break;
    case kCmdTrim:
      s = backend_->Trim(r.offset, r.length);
      if (s.ok() && fua) s = backend_->Flush();
      break;
    case kCmdWriteZeroes:
      s = WriteZeroes(*backend_, r.offset, r.length, fua);
      break;
  }
  bool send_data = r.type == kCmdRead && s.ok();
  uint32_t error = NbdErrorOf(ErrnoOf(s));
  Reply(r.handle, error, send_data ? r.buffer.data() : nullptr, send_data ? r.length : 0);
}

void NbdConnection::Reply(uint64_t handle, uint32_t error, const void* data, uint32_t len) {
  uint8_t head[16];
  PutBe32(head, kSimpleReplyMagic);
  PutBe32(head + 4, error);
  PutBe64(head + 8, handle);
  iovec iov[2] = {{head, sizeof(head)}, {const_cast<void*>(data), len}};
  std::lock_guard lock(write_mu_);
  // A failed send means the client is gone; the reader sees that too.
  (void)WriteVecFull(serve_fd_, iov, len > 0 ? 2 : 1);
}

}  // namespace shim
