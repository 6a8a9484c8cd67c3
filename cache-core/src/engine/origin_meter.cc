#include "engine/origin_meter.h"

namespace cachecore {

namespace {
bool Measured(const IoRequest& r) { return r.op != IoOp::kFlush; }
}  // namespace

void OriginMeter::Advance(Clock::time_point now) {
  if (now <= last_) return;
  queue_ns_ += uint64_t(at_origin_) * uint64_t(std::chrono::nanoseconds(now - last_).count());
  last_ = now;
}

void OriginMeter::Arrive(int64_t n) {
  MutexLock lock(mu_);
  // The clock read under the lock: a reading taken before an update must
  // never exceed what the update leaves (the cleaner subtracts them).
  Advance(Clock::now());
  at_origin_ += n;
}

uint64_t OriginMeter::QueueNanoseconds(Clock::time_point now) const {
  MutexLock lock(mu_);
  const auto since = now > last_ ? uint64_t(std::chrono::nanoseconds(now - last_).count()) : 0;
  return queue_ns_ + uint64_t(at_origin_) * since;
}

Status OriginMeter::SubmitAndWait(std::span<IoRequest> requests) {
  int64_t measured = 0;
  for (const IoRequest& r : requests) measured += Measured(r) ? 1 : 0;
  if (measured == 0) return origin_->SubmitAndWait(requests);
  Arrive(measured);
  Status s = origin_->SubmitAndWait(requests);
  Leave(measured);
  return s;
}

void OriginMeter::Submit(AsyncIo& io) {
  if (!Measured(io.request)) return origin_->Submit(io);
  Arrive(1);
  io.metered_done = io.done;
  io.done = this;
  origin_->Submit(io);
}

void OriginMeter::IoDone(AsyncIo& io) {
  io.done = io.metered_done;
  io.metered_done = nullptr;
  Leave(1);
  io.done->IoDone(io);
}

}  // namespace cachecore
