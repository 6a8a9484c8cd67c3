#include "shim/block_backend.h"

#include <algorithm>
#include <cerrno>

#include "cachecore/devices/block_device.h"

namespace shim {

using cachecore::StatusCode;

namespace {
constexpr uint32_t kZeroChunk = 1 << 20;
}  // namespace

const void* ZeroChunk() {
  static const cachecore::AlignedBuffer* zeros = new cachecore::AlignedBuffer(kZeroChunk);
  return zeros->data();
}

uint32_t ZeroChunkBytes() { return kZeroChunk; }

Status WriteZeroes(BlockBackend& backend, uint64_t offset, uint64_t length, bool fua) {
  for (uint64_t done = 0; done < length;) {
    uint64_t n = std::min<uint64_t>(kZeroChunk, length - done);
    bool last = done + n == length;
    CACHECORE_RETURN_IF_ERROR(backend.Write(offset + done, ZeroChunk(), n, fua && last));
    done += n;
  }
  return Status::Ok();
}

void WriteNextZeroChunk(BlockBackend& backend, uint64_t offset, uint64_t length, bool fua,
                        uint64_t* zeroed, Completion* done) {
  uint64_t n = std::min<uint64_t>(kZeroChunk, length - *zeroed);
  bool last = *zeroed + n == length;
  uint64_t at = offset + *zeroed;
  *zeroed += n;
  backend.WriteAsync(at, ZeroChunk(), n, fua && last, done);
}

void BlockBackend::ReadAsync(uint64_t offset, void* buffer, uint64_t length, Completion* done) {
  done->Done(Read(offset, buffer, length));
}

void BlockBackend::WriteAsync(uint64_t offset, const void* buffer, uint64_t length, bool fua,
                              Completion* done) {
  done->Done(Write(offset, buffer, length, fua));
}

void BlockBackend::FlushAsync(Completion* done) { done->Done(Flush()); }

void BlockBackend::TrimAsync(uint64_t offset, uint64_t length, Completion* done) {
  done->Done(Trim(offset, length));
}

int ErrnoOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kInvalidArgument: return EINVAL;
    case StatusCode::kOutOfRange:
    case StatusCode::kNoSpace: return ENOSPC;
    case StatusCode::kBusy: return EBUSY;
    case StatusCode::kNotSupported: return EOPNOTSUPP;
    default: return EIO;
  }
}

}  // namespace shim
