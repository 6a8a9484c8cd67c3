// BlockDevice: the seam between cache-core and the operating system. Every byte
// the engine moves goes through one of these: libaio on a file or a block
// device, memory for tests and trace replay, or a fault-injecting wrapper.
//
// Contract for every implementation (tests/block_device_contract_test.cc):
// - offsets and lengths are multiples of 512 and lie within size_bytes();
//   anything else fails with kInvalidArgument or kOutOfRange and touches nothing;
// - buffers are aligned to 512 bytes (O_DIRECT needs it; AlignedBuffer gives 4096);
// - a Flush() makes every write that completed before it durable;
// - a region that was never written, or was discarded, reads as zeros
//   (a libaio device reads what the file or disk holds);
// - all calls are safe from many threads at once.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>

#include "cachecore/base/status.h"
#include "cachecore/devices/reactor.h"

namespace cachecore {

constexpr uint32_t kSectorSize = 512;
constexpr uint32_t kIoAlignment = 4096;

enum class IoOp { kRead, kWrite, kFlush, kDiscard };

const char* IoOpName(IoOp op);

// One request of a batch. The device fills in `status` when it completes.
struct IoRequest {
  IoOp op = IoOp::kRead;
  uint64_t offset = 0;
  uint64_t length = 0;
  void* buffer = nullptr;  // kRead/kWrite only; caller owns it until completion
  Status status;
};

struct AsyncIo;

// What waits for an AsyncIo: IoDone runs once, with io.request.status set.
class IoCompletion {
 public:
  virtual void IoDone(AsyncIo& io) = 0;

 protected:
  ~IoCompletion() = default;
};

// One request of BlockDevice::Submit. The caller owns it, and the buffer,
// until IoDone; a device may use the rest while the request runs.
struct AsyncIo final : ReactorOp, ReactorTask {
  IoRequest request;
  IoCompletion* done = nullptr;
  int fd = -1;  // the device's, while on a reactor
  // A device whose requests complete on a thread of its own (NbdDevice)
  // posts the request back to the reactor that submitted it, here.
  Reactor* reactor = nullptr;
  void* device_state = nullptr;  // such a device's, while it runs the request
  bool answered = false;         // such a device's: the reply came
  // A device that passes the request on to another at another offset (a
  // cache's volumes, engine/volume_set.h): the caller's completion and the
  // offset it moved by, put back before the caller's IoDone.
  IoCompletion* routed_done = nullptr;
  uint64_t routed_base = 0;
  // The engine's origin meter (engine/origin_meter.h), which times the
  // request: the caller's completion, put back before the caller's IoDone.
  IoCompletion* metered_done = nullptr;
  // An encrypted cache device (crypto/encrypted_device.h): the caller's
  // completion, and a write's plaintext buffer while its ciphertext goes out.
  IoCompletion* cipher_done = nullptr;
  void* cipher_plain = nullptr;
  // The reactor's completion: the request's status from `result`, then
  // IoDone (devices/uring_device.cc).
  void OnComplete(int result) override;
  // Posted back by such a device, the status set: IoDone.
  void Run() override { done->IoDone(*this); }
};

class BlockDevice {
 public:
  virtual ~BlockDevice() = default;

  virtual uint64_t size_bytes() const = 0;
  // What identifies the storage behind this device (a path, a device id): the
  // superblock records it so that a cache is never paired with another origin.
  virtual std::string identity() const = 0;
  // Whether kDiscard does anything (nbdkit style: the device says, callers
  // ask). A device may still find out at the call that it cannot: then the
  // discard fails with kNotSupported and the data stays.
  virtual bool supports_discard() const = 0;

  // Submits every request at once (a device may run them in parallel, in any
  // order) and returns when all have completed. Returns the first failure; each
  // request's own status tells which failed.
  virtual Status SubmitAndWait(std::span<IoRequest> requests) = 0;

  // Starts one request; `done` is io.done. On a reactor's thread
  // (cachecore/devices/reactor.h) a device that can (files and block
  // devices through io_uring or libaio, NBD) runs it on that reactor and
  // IoDone runs there later, on the same thread; otherwise (and by
  // default) the request runs to completion and IoDone runs before Submit
  // returns: the reactor waits for the device meanwhile.
  virtual void Submit(AsyncIo& io);
  // Whether a discard through Submit on a reactor returns without waiting
  // for the device (NBD, memory; files and block devices discard
  // synchronously): the engine sends the others to a thread of its own.
  virtual bool discards_without_waiting() const { return false; }

  Status Read(uint64_t offset, void* buffer, uint64_t length);
  Status Write(uint64_t offset, const void* buffer, uint64_t length);
  Status Flush();
  Status Discard(uint64_t offset, uint64_t length);

 protected:
  // Shared argument check: alignment and bounds. OK when the request is valid.
  Status CheckRequest(const IoRequest& request) const;
};

// A heap buffer aligned for O_DIRECT. Owns its memory; not copyable.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size);
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Grows (never shrinks) to at least `size`; contents are not kept.
  void Reserve(size_t size);

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cachecore
