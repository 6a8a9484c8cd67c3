#include "cachecore/devices/nbd_device.h"

#include <libnbd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

namespace cachecore {

namespace {

constexpr uint64_t kMaxRequest = 32 << 20;  // what NBD servers accept at least

Status LastError(const std::string& what) {
  const char* msg = nbd_get_error();
  return Status::IoError(what + ": " + (msg ? msg : "unknown NBD error"));
}

// One request's completion, written by libnbd's callback.
struct Completion {
  IoRequest* request;
  int error = 0;
};

int OnComplete(void* user_data, int* error) {
  auto* c = static_cast<Completion*>(user_data);
  if (*error != 0) c->error = *error;
  return 1;  // libnbd retires the command
}

class NbdDevice : public BlockDevice {
 public:
  NbdDevice(std::string uri, std::vector<nbd_handle*> handles, uint64_t size, bool trim, bool flush)
      : uri_(std::move(uri)), free_(handles), all_(std::move(handles)), size_(size), trim_(trim),
        flush_(flush) {}
  ~NbdDevice() override {
    for (nbd_handle* h : all_) {
      nbd_shutdown(h, 0);
      nbd_close(h);
    }
  }

  uint64_t size_bytes() const override { return size_; }
  std::string identity() const override { return "nbd:" + uri_; }
  bool supports_discard() const override { return trim_; }

  Status SubmitAndWait(std::span<IoRequest> requests) override {
    nbd_handle* h = Acquire();
    Status s = Run(h, requests);
    Release(h);
    return s;
  }

 private:
  nbd_handle* Acquire() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !free_.empty(); });
    nbd_handle* h = free_.back();
    free_.pop_back();
    return h;
  }
  void Release(nbd_handle* h) {
    {
      std::lock_guard lock(mu_);
      free_.push_back(h);
    }
    cv_.notify_one();
  }

  // Issues one command for [offset, offset+length) of `r`; 0 on success.
  int64_t Issue(nbd_handle* h, IoRequest& r, uint64_t offset, uint64_t length, Completion* c) {
    nbd_completion_callback done{.callback = OnComplete, .user_data = c, .free = nullptr};
    uint8_t* at = static_cast<uint8_t*>(r.buffer) + (offset - r.offset);
    switch (r.op) {
      case IoOp::kRead: return nbd_aio_pread(h, at, length, offset, done, 0);
      case IoOp::kWrite: return nbd_aio_pwrite(h, at, length, offset, done, 0);
      case IoOp::kFlush: return nbd_aio_flush(h, done, 0);
      case IoOp::kDiscard: return nbd_aio_trim(h, length, offset, done, 0);
    }
    return -1;
  }

  static bool Skipped(const IoRequest& r, bool flush, bool trim) {
    return (r.op == IoOp::kFlush && !flush) || (r.op == IoOp::kDiscard && !trim);
  }
  static uint64_t Pieces(const IoRequest& r) {
    return r.op == IoOp::kFlush ? 1 : (r.length + kMaxRequest - 1) / kMaxRequest;
  }

  Status Run(nbd_handle* h, std::span<IoRequest> requests) {
    // One completion per command, allocated up front: libnbd's callbacks
    // hold pointers into this vector until nbd_poll has retired them all.
    uint64_t pieces = 0;
    for (IoRequest& r : requests) {
      r.status = CheckRequest(r);
      pieces += (!r.status.ok() || Skipped(r, flush_, trim_)) ? 0 : Pieces(r);
    }
    std::vector<Completion> completions;
    completions.reserve(pieces);
    for (IoRequest& r : requests) {
      if (!r.status.ok()) continue;
      if (Skipped(r, flush_, trim_)) {
        // No flush: the server has no volatile cache to flush. No trim: the
        // caller learns that the data stays.
        if (r.op == IoOp::kDiscard) r.status = Status::NotSupported("the NBD server cannot trim");
        continue;
      }
      uint64_t end = r.op == IoOp::kFlush ? r.offset + 1 : r.offset + r.length;
      for (uint64_t at = r.offset; at < end; at += kMaxRequest) {
        completions.push_back({&r});
        Completion* c = &completions.back();
        if (Issue(h, r, at, std::min(kMaxRequest, end - at), c) < 0) {
          r.status = LastError("NBD request");
        }
      }
    }
    while (nbd_aio_in_flight(h) > 0) {
      if (nbd_poll(h, -1) < 0) return LastError("NBD connection to " + uri_);
    }
    for (Completion& c : completions) {
      if (c.error > 0 && c.request->status.ok()) {
        c.request->status = Status::IoError("NBD server: " + std::string(strerror(c.error)));
      }
    }
    for (IoRequest& r : requests) {
      if (!r.status.ok()) return r.status;
    }
    return Status::Ok();
  }

  std::string uri_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<nbd_handle*> free_, all_;
  uint64_t size_;
  bool trim_, flush_;
};

Result<nbd_handle*> Connect(const std::string& uri) {
  nbd_handle* h = nbd_create();
  if (!h) return LastError("nbd_create");
  if (nbd_connect_uri(h, uri.c_str()) < 0) {
    Status s = Status::NotFound("cannot connect to " + uri + ": " +
                                (nbd_get_error() ? nbd_get_error() : "unknown error"));
    nbd_close(h);
    return s;
  }
  return h;
}

}  // namespace

bool IsNbdUri(const std::string& path) {
  for (const char* scheme : {"nbd://", "nbds://", "nbd+unix://", "nbds+unix://", "nbd+vsock://"}) {
    if (path.rfind(scheme, 0) == 0) return true;
  }
  return false;
}

Result<std::unique_ptr<BlockDevice>> OpenNbdDevice(const std::string& uri, const NbdDeviceOptions& options) {
  if (!IsNbdUri(uri)) return Status::InvalidArgument("'" + uri + "' is not an NBD URI");
  Result<nbd_handle*> first = Connect(uri);
  if (!first.ok()) return first.status();
  nbd_handle* h = first.value();
  int64_t size = nbd_get_size(h);
  if (size < 0 || size % 512 != 0) {
    nbd_close(h);
    return Status::InvalidArgument("the NBD export at " + uri + " has a size that is not a multiple of 512");
  }
  bool trim = nbd_can_trim(h) == 1, flush = nbd_can_flush(h) == 1;
  std::vector<nbd_handle*> handles{h};
  unsigned want = nbd_can_multi_conn(h) == 1 ? std::max(1u, options.connections) : 1;
  while (handles.size() < want) {
    Result<nbd_handle*> more = Connect(uri);
    if (!more.ok()) break;  // fewer connections still work
    handles.push_back(more.value());
  }
  return std::unique_ptr<BlockDevice>(
      new NbdDevice(uri, std::move(handles), static_cast<uint64_t>(size), trim, flush));
}

}  // namespace cachecore
