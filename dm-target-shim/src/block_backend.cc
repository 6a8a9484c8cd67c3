#include "shim/block_backend.h"

#include <algorithm>
#include <cerrno>

#include "cachecore/devices/block_device.h"

namespace shim {

using cachecore::StatusCode;

namespace {
constexpr uint32_t kZeroChunk = 1 << 20;
}  // namespace

Status WriteZeroes(BlockBackend& backend, uint64_t offset, uint64_t length, bool fua) {
  // Never freed: serving threads may still be writing from it at exit.
  static const cachecore::AlignedBuffer* zeros = new cachecore::AlignedBuffer(kZeroChunk);
  for (uint64_t done = 0; done < length;) {
    uint64_t n = std::min<uint64_t>(kZeroChunk, length - done);
    bool last = done + n == length;
    CACHECORE_RETURN_IF_ERROR(backend.Write(offset + done, zeros->data(), n, fua && last));
    done += n;
  }
  return Status::Ok();
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
