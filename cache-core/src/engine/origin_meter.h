// OriginMeter: the origin as the engine's request paths see it, counting
// the reads, writes and discards they send it. The background cleaner
// reads the count to tell whether clients keep the origin busy (it then
// backs off to a trickle, see writeback_controller.h). Flushes are not
// counted (a write-back client's syncs reach the origin as flushes of
// nothing), and the engine's background work (the cleaner, the mover)
// uses the origin directly: neither makes the origin look busy. Not a
// public header.
#pragma once

#include <atomic>

#include "cachecore/devices/block_device.h"

namespace cachecore {

class OriginMeter final : public BlockDevice {
 public:
  explicit OriginMeter(BlockDevice* origin) : origin_(origin) {}

  // Reads, writes and discards sent so far (a batch counts each).
  uint64_t operations() const { return operations_.load(std::memory_order_relaxed); }

  uint64_t size_bytes() const override { return origin_->size_bytes(); }
  std::string identity() const override { return origin_->identity(); }
  bool supports_discard() const override { return origin_->supports_discard(); }
  Status SubmitAndWait(std::span<IoRequest> requests) override {
    uint64_t counted = 0;
    for (const IoRequest& r : requests) counted += r.op != IoOp::kFlush ? 1 : 0;
    if (counted != 0) operations_.fetch_add(counted, std::memory_order_relaxed);
    return origin_->SubmitAndWait(requests);
  }
  void Submit(AsyncIo& io) override {
    if (io.request.op != IoOp::kFlush) operations_.fetch_add(1, std::memory_order_relaxed);
    origin_->Submit(io);
  }
  bool discards_without_waiting() const override { return origin_->discards_without_waiting(); }

 private:
  BlockDevice* const origin_;
  std::atomic<uint64_t> operations_{0};
};

}  // namespace cachecore
