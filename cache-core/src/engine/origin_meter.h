// OriginMeter: the origin as the engine's request paths see it, measuring
// how many of their reads, writes and discards wait there over time. The
// background cleaner reads it to tell whether clients keep the origin busy
// (it then backs off to a trickle, see writeback_controller.h): the
// clients' mean queue depth at the origin, which by Little's law is their
// rate times their latency, so it rises with a slow disk's seeks as with a
// fast one's load, and stays low for a fast origin with room to spare.
// Flushes are not measured (a write-back client's syncs reach the origin
// as flushes of nothing, which wait behind the cleaner's own writes), and
// the engine's background work (the cleaner, the mover) uses the origin
// directly: neither makes the origin look busy. Not a public header.
#pragma once

#include <chrono>
#include <cstdint>

#include "base/thread_annotations.h"
#include "cachecore/devices/block_device.h"

namespace cachecore {

class OriginMeter final : public BlockDevice, private IoCompletion {
 public:
  using Clock = std::chrono::steady_clock;
  explicit OriginMeter(BlockDevice* origin) : origin_(origin) {}

  // The time the clients' requests have spent at the origin so far, summed
  // over them, in nanoseconds (those still there counted up to `now`). Its
  // growth over an interval divided by the interval's length is the mean
  // number of client requests at the origin over it (its queue depth).
  // Never less than a reading with an earlier `now`.
  uint64_t QueueNanoseconds(Clock::time_point now) const;

  uint64_t size_bytes() const override { return origin_->size_bytes(); }
  std::string identity() const override { return origin_->identity(); }
  bool supports_discard() const override { return origin_->supports_discard(); }
  Status SubmitAndWait(std::span<IoRequest> requests) override;
  void Submit(AsyncIo& io) override;
  bool discards_without_waiting() const override { return origin_->discards_without_waiting(); }

 private:
  // `n` client requests reach the origin, or leave it.
  void Arrive(int64_t n);
  void Leave(int64_t n) { Arrive(-n); }
  // A metered request's completion: the caller's is put back and called.
  void IoDone(AsyncIo& io) override;
  // Adds the time since last_ for those at the origin; under mu_.
  void Advance(Clock::time_point now) REQUIRES(mu_);

  BlockDevice* const origin_;
  mutable Mutex mu_;
  int64_t at_origin_ GUARDED_BY(mu_) = 0;
  uint64_t queue_ns_ GUARDED_BY(mu_) = 0;  // up to last_
  Clock::time_point last_ GUARDED_BY(mu_) = Clock::now();
};

}  // namespace cachecore
