// WritebackController: how many dirty lines the cleaner may clean now, so
// that dirty data stays near a target share of the cache (as bcache's
// writeback_percent does) instead of waiting for a high watermark and then
// draining in a rush. Not a public header; no locks (the cleaner's thread
// owns it), no clock (the caller says how much time passed: the tests
// drive it by counts).
//
// The rule, per tick of `seconds`:
// - at least flat out when dirty lines pass the low watermark, or clean
//   and free lines fall under the reserve: the hard limits, whatever the
//   origin does;
// - a rate in lines per second, proportional-integral on the
//   distance from the target: (dirty - target) / kProportionalSeconds plus
//   the integral of that distance over time / kIntegralSeconds2. The
//   proportional part drains an excess in seconds; the integral part
//   learns a steady write rate, so that dirty data settles at the target
//   and not above it by that rate times kProportionalSeconds; it never
//   asks for more than what is above the target (back-calculation), so it
//   unwinds as soon as a burst is over;
// - a trickle (one batch every kTrickleSeconds) while the origin is busy
//   with client I/O: cleaning then costs the clients' latency;
// - the rate's lines build up as a budget, spent in batches (one sorted,
//   coalesced origin write and one flush each) once a batch's worth has
//   built up, or what there is after kMaxWaitSeconds: never line by line.
#pragma once

#include <cstdint>

namespace cachecore {

class WritebackController {
 public:
  static constexpr double kProportionalSeconds = 2.0;
  static constexpr double kIntegralSeconds2 = 8.0;
  static constexpr double kTrickleSeconds = 10.0;
  // A budget short of a batch is still spent after this long.
  static constexpr double kMaxWaitSeconds = 5.0;

  struct Reading {
    uint64_t capacity_lines = 0;
    uint64_t dirty_lines = 0;
    uint64_t target_lines = 0;    // the setpoint
    uint64_t flat_out_lines = 0;  // above this many dirty lines: no limit
    uint64_t reserve_lines = 0;   // clean or free lines kept at least
    uint32_t batch_lines = 1;     // lines per pass
    bool origin_busy = false;     // clients keep the origin busy
  };
  enum class State { kIdle, kControlled, kBackingOff, kFlatOut };

  // Advances the controller by `seconds` and returns how many lines the
  // cleaner should clean now (0: none yet; the budget builds up).
  uint64_t Tick(const Reading& reading, double seconds);
  // After the passes that followed Tick: the lines they cleaned. Fewer
  // than allowed (lines busy, errors, nothing dirty) means the rate was
  // not what limited cleaning: the integral then holds still.
  void Spent(uint64_t allowed, uint64_t cleaned);

  State state() const { return state_; }
  // Lines per second allowed at the last tick (flat out: 0, no limit).
  double rate() const { return rate_; }

 private:
  // Reserve and low watermark: the lines to clean flat out, or 0.
  static uint64_t FlatOutLines(const Reading& r);
  // `above`: the dirty lines above the target (0 at or below it).
  double ControlledRate(const Reading& r, double seconds, double above);

  State state_ = State::kIdle;
  double rate_ = 0;
  double integral_ = 0;    // line-seconds above the target
  double left_error_ = 0;  // lines above the target the last passes left
  uint64_t last_dirty_ = 0, last_target_ = 0;  // the last reading's
  double budget_ = 0;      // lines allowed and not yet cleaned
  double waited_ = 0;      // seconds since the budget was last spent
  bool saturated_ = false;  // the last allowance was not all used
};

}  // namespace cachecore
