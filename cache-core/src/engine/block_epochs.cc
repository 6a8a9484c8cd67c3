#include "engine/block_epochs.h"

#include <algorithm>

namespace cachecore {

namespace {
// How far behind the current epoch an unstable block's epoch is kept.
constexpr uint64_t kFloorLag = 128;
}  // namespace

void BlockEpochs::Sweep(uint64_t current, uint64_t completed) {
  const size_t part = (bytes_.size() + kSweepParts - 1) / kSweepParts;
  const size_t begin = std::min(bytes_.size(), (current % kSweepParts) * part);
  const size_t end = std::min(bytes_.size(), begin + part);
  const uint64_t floor = current > kFloorLag ? current - kFloorLag : 0;
  for (size_t i = begin; i < end; ++i) {
    uint8_t byte = Load(i);
    if (byte == 0) continue;
    const uint64_t epoch = Decode(byte, current);
    uint8_t swept;
    if (epoch < completed) swept = 0;
    else if (epoch < floor) swept = Encode(floor);
    else continue;
    std::atomic_ref<uint8_t>(bytes_[i]).compare_exchange_strong(byte, swept, std::memory_order_relaxed);
  }
}

}  // namespace cachecore
