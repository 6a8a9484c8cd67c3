#include "cachecore/devices/wipe.h"

#include <algorithm>
#include <cstring>

namespace cachecore {

namespace {
constexpr uint64_t kChunk = 4 << 20;
constexpr uint64_t kDiscardChunk = 1ull << 30;

bool AllZero(const uint8_t* p, uint64_t n) {
  static const uint8_t kZeros[4096] = {};
  for (uint64_t i = 0; i < n; i += sizeof(kZeros)) {
    if (std::memcmp(p + i, kZeros, std::min<uint64_t>(sizeof(kZeros), n - i)) != 0) return false;
  }
  return true;
}
}  // namespace

Result<WipeReport> WipeDevice(BlockDevice* device, const std::function<void(uint64_t, uint64_t)>& progress) {
  WipeReport report;
  const uint64_t size = device->size_bytes();
  report.discarded = device->supports_discard();
  for (uint64_t at = 0; report.discarded && at < size; at += kDiscardChunk) {
    Status s = device->Discard(at, std::min(kDiscardChunk, size - at));
    if (s.code() == StatusCode::kNotSupported) report.discarded = false;
    else CACHECORE_RETURN_IF_ERROR(s);
  }
  // Whatever still reads as data is overwritten.
  AlignedBuffer buf(kChunk), zeros(kChunk);
  std::memset(zeros.data(), 0, kChunk);
  for (uint64_t at = 0; at < size; at += kChunk) {
    uint64_t n = std::min(kChunk, size - at);
    CACHECORE_RETURN_IF_ERROR(device->Read(at, buf.data(), n));
    if (!AllZero(buf.data(), n)) {
      CACHECORE_RETURN_IF_ERROR(device->Write(at, zeros.data(), n));
      report.bytes_overwritten += n;
    }
    if (progress) progress(at + n, size);
  }
  CACHECORE_RETURN_IF_ERROR(device->Flush());
  return report;
}

}  // namespace cachecore
