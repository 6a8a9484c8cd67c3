#include "cachecore/devices/block_device.h"

#include <cstring>
#include <utility>

namespace cachecore {

const char* IoOpName(IoOp op) {
  switch (op) {
    case IoOp::kRead: return "read";
    case IoOp::kWrite: return "write";
    case IoOp::kFlush: return "flush";
    case IoOp::kDiscard: return "discard";
  }
  return "?";
}

namespace {
Status SubmitOne(BlockDevice* device, IoOp op, uint64_t offset, void* buffer, uint64_t length) {
  IoRequest request{op, offset, length, buffer, Status()};
  return device->SubmitAndWait(std::span<IoRequest>(&request, 1));
}
}  // namespace

Status BlockDevice::Read(uint64_t offset, void* buffer, uint64_t length) {
  return SubmitOne(this, IoOp::kRead, offset, buffer, length);
}

Status BlockDevice::Write(uint64_t offset, const void* buffer, uint64_t length) {
  // The device never writes into a write buffer; the cast only fits IoRequest.
  return SubmitOne(this, IoOp::kWrite, offset, const_cast<void*>(buffer), length);
}

void BlockDevice::Submit(AsyncIo& io) {
  (void)SubmitAndWait(std::span<IoRequest>(&io.request, 1));  // the outcome is in the request
  io.done->IoDone(io);
}

Status BlockDevice::Flush() { return SubmitOne(this, IoOp::kFlush, 0, nullptr, 0); }

Status BlockDevice::Discard(uint64_t offset, uint64_t length) {
  return SubmitOne(this, IoOp::kDiscard, offset, nullptr, length);
}

Status BlockDevice::CheckRequest(const IoRequest& request) const {
  if (request.op == IoOp::kFlush) return Status::Ok();
  if (request.offset % kSectorSize != 0 || request.length % kSectorSize != 0) {
    return Status::InvalidArgument("offset and length must be multiples of 512 bytes");
  }
  if (request.length == 0) return Status::InvalidArgument("zero-length request");
  if (request.offset > size_bytes() || request.length > size_bytes() - request.offset) {
    return Status::OutOfRange("request ends beyond the device (" +
                              std::to_string(size_bytes()) + " bytes)");
  }
  bool needs_buffer = request.op == IoOp::kRead || request.op == IoOp::kWrite;
  if (needs_buffer && (request.buffer == nullptr ||
                       reinterpret_cast<uintptr_t>(request.buffer) % kSectorSize != 0)) {
    return Status::InvalidArgument("buffer must be 512-byte aligned");
  }
  return Status::Ok();
}

AlignedBuffer::AlignedBuffer(size_t size) { Reserve(size); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void AlignedBuffer::Reserve(size_t size) {
  if (size <= size_) return;
  size_t rounded = (size + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
  void* p = std::aligned_alloc(kIoAlignment, rounded);
  if (p == nullptr) std::abort();  // out of memory is not a recoverable state here
  std::free(data_);
  data_ = static_cast<uint8_t*>(p);
  size_ = rounded;
  std::memset(data_, 0, size_);
}

}  // namespace cachecore
