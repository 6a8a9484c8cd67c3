#include "engine/writeback_controller.h"

#include <algorithm>
#include <cmath>

namespace cachecore {

uint64_t WritebackController::FlatOutLines(const Reading& r) {
  const uint64_t clean_or_free = r.capacity_lines - std::min(r.dirty_lines, r.capacity_lines);
  uint64_t lines = 0;
  if (r.dirty_lines > r.flat_out_lines) lines = r.dirty_lines - r.flat_out_lines;
  if (clean_or_free < r.reserve_lines) lines = std::max(lines, r.reserve_lines - clean_or_free);
  // A batch past the limit, so that the next tick does not start over
  // at its edge.
  return lines == 0 ? 0 : std::min(lines + r.batch_lines, r.dirty_lines);
}

double WritebackController::ControlledRate(const Reading& r, double seconds, double above) {
  const double error = static_cast<double>(r.dirty_lines) - static_cast<double>(r.target_lines);
  // The integral learns from where the last passes left dirty lines (the
  // reading comes before them, so it always holds a tick's writes), and
  // only while the rate is what limits cleaning: not while the origin is
  // busy (the trickle limits it), nor when the last allowance was not used
  // up (busy lines, errors: more would not help).
  if (!r.origin_busy && !saturated_) {
    const double ceiling = kIntegralSeconds2 * static_cast<double>(r.capacity_lines);
    integral_ = std::clamp(integral_ + left_error_ * seconds, 0.0, ceiling);
  }
  const double proportional = error / kProportionalSeconds;
  double rate = std::max(0.0, proportional + integral_ / kIntegralSeconds2);
  if (r.dirty_lines <= r.target_lines) rate = 0;  // never below the target
  // Back-calculation: a tick never cleans more than what is above the
  // target, so an integral asking for more is brought back to what that
  // allows. Otherwise it would never unwind after a burst (dirty lines
  // never fall below the target, so it never learns less).
  if (seconds > 0 && rate * seconds > above) {
    rate = above / seconds;
    integral_ = std::max(0.0, (rate - proportional) * kIntegralSeconds2);
  }
  if (r.origin_busy && rate > 0) {
    rate = std::min(rate, std::max<double>(r.batch_lines, 1) / kTrickleSeconds);
  }
  return rate;
}

uint64_t WritebackController::Tick(const Reading& r, double seconds) {
  seconds = std::max(seconds, 0.0);
  last_dirty_ = r.dirty_lines;
  last_target_ = r.target_lines;
  const double above = r.dirty_lines > r.target_lines ? double(r.dirty_lines - r.target_lines) : 0.0;
  rate_ = ControlledRate(r, seconds, above);
  // The budget never outgrows what is above the target, nor two seconds
  // of the rate (a pause does not turn into a burst), but may reach a batch.
  const double cap = std::min(above, std::max(2.0 * rate_, double(r.batch_lines)));
  budget_ = std::min(budget_ + rate_ * seconds, cap);
  waited_ += seconds;
  // The hard limits are a floor under the rate, not instead of it: the
  // rate keeps learning meanwhile, so that a write rate that pushed dirty
  // lines past the low watermark is met by the rate, not by flat out at
  // the watermark for ever.
  if (const uint64_t flat = FlatOutLines(r); flat > 0) {
    state_ = State::kFlatOut;
    waited_ = 0;
    return std::max(flat, static_cast<uint64_t>(std::floor(budget_)));
  }
  state_ = rate_ == 0 ? State::kIdle : r.origin_busy ? State::kBackingOff : State::kControlled;
  // A batch at a time; what is short of one waits kMaxWaitSeconds (from
  // when there was something to clean), so that a slow rate still cleans
  // in passes of many lines, each with one origin flush.
  if (budget_ < 1) waited_ = 0;
  if (budget_ < 1 || (budget_ < r.batch_lines && waited_ < kMaxWaitSeconds)) return 0;
  waited_ = 0;
  return static_cast<uint64_t>(std::floor(budget_));
}

void WritebackController::Spent(uint64_t allowed, uint64_t cleaned) {
  saturated_ = cleaned < allowed;
  const uint64_t left = last_dirty_ - std::min(cleaned, last_dirty_);
  left_error_ = static_cast<double>(left) - static_cast<double>(last_target_);
  budget_ = std::max(0.0, budget_ - static_cast<double>(std::max(cleaned, allowed)));
}

}  // namespace cachecore
