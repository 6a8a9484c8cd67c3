// Write-back under pressure: the background cleaner's loop around its
// controller (writeback_controller.h), and the throttling of writers once
// dirty lines pass the high watermark. No request ever cleans a line
// itself (a miss with no clean or free slot goes around the cache), so
// what keeps clean lines at hand is this: the controller near the target,
// flat out past the low watermark or under the reserve, and writers slowed
// past the high one.
#include <algorithm>
#include <thread>

#include "base/thread_name.h"
#include "engine/engine_impl.h"

namespace cachecore {

namespace {

constexpr auto kCleanerTick = std::chrono::milliseconds(100);
// Clean or free lines the cleaner keeps at least, in percent of the cache.
constexpr uint64_t kReservePct = 2;
// The clients' mean queue depth at the origin from which it counts as busy
// (the cleaner then trickles): a request of theirs there a quarter of the
// time.
constexpr double kBusyOriginQueueDepth = 0.25;
// A write-back write's longest wait, with every line dirty.
constexpr auto kMaxThrottle = std::chrono::microseconds(10000);

// The clean or free lines the cleaner keeps at least (one at least).
uint64_t ReserveLines(uint32_t capacity) {
  return std::max<uint64_t>(1, uint64_t{capacity} * kReservePct / 100);
}

// Moves `average` towards `now` as a one-second moving average would.
void Smooth(double& average, double now, double seconds) {
  average += (now - average) * std::min(1.0, seconds);
}

}  // namespace

namespace {
int64_t SteadyNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// Bytes a second cleaned between `blocks_then`, `seconds` ago, and now.
uint64_t CleanedPerSecond(uint64_t blocks_now, uint64_t blocks_then, double seconds) {
  const uint64_t cleaned = blocks_now - std::min(blocks_now, blocks_then);  // counters may be reset
  return static_cast<uint64_t>(double(cleaned) * kBlockSize / seconds);
}
// A rate left by an update this long ago is stale (a pass still running).
constexpr double kStaleRateSeconds = 2.0;
}  // namespace

// The bytes a second cleaned since the last update, once a second of wall
// time has passed (a flat-out tick may run its passes for many seconds:
// updated after each of them too).
void Engine::Impl::UpdateWritebackRate() {
  const int64_t now = SteadyNanoseconds();
  const double elapsed = double(now - rate_updated_ns.load()) / 1e9;
  if (elapsed < 1.0) return;
  const uint64_t blocks = stats.cleaned_blocks.load();
  stats.writeback_rate_bytes.store(CleanedPerSecond(blocks, rate_blocks.load(), elapsed), std::memory_order_relaxed);
  rate_blocks.store(blocks);
  rate_updated_ns.store(now);
}

// What `stats` shows. A pass that cleans while clients keep the disk busy
// may run many seconds, and the rate the one before it left (at a burst's
// speed) was shown all along while nothing was cleaned: past two seconds
// without an update, what was cleaned since, per second since.
uint64_t Engine::Impl::WritebackRateNow() const {
  const double since = double(SteadyNanoseconds() - rate_updated_ns.load()) / 1e9;
  // Without ticks (no background cleaner: replay, tools) only Flush cleans,
  // and the rate stays what no tick ever set.
  if (since < kStaleRateSeconds || !cleaner_ticked.load()) {
    return stats.writeback_rate_bytes.load(std::memory_order_relaxed);
  }
  return CleanedPerSecond(stats.cleaned_blocks.load(), rate_blocks.load(), since);
}

WritebackController::Reading Engine::Impl::CleanerReading(double seconds) {
  const auto now = OriginMeter::Clock::now();
  const uint64_t queue_ns = origin_meter.QueueNanoseconds(now);
  const double wall_ns = std::chrono::duration<double, std::nano>(now - origin_seen_at).count();
  if (seconds > 0 && wall_ns > 0) {
    // The average capped at one: past that the origin is no busier for the
    // cleaner's purpose, and an average of a depth of 16 took four seconds
    // to fall under the threshold once the clients stopped (from one, about
    // a second). The ticks' depths are not capped: clients at depth 16 a
    // tenth of the time keep the origin busy.
    const uint64_t grew = queue_ns - std::min(queue_ns, origin_queue_ns_seen);
    Smooth(origin_queue_depth, double(grew) / wall_ns, seconds);
    origin_queue_depth = std::min(origin_queue_depth, 1.0);
  }
  origin_queue_ns_seen = queue_ns;
  origin_seen_at = now;
  WritebackController::Reading r;
  r.capacity_lines = capacity;
  r.dirty_lines = stats.dirty_lines.load();
  r.batch_lines = std::max<uint32_t>(cleaner_batch_lines.load(), 1);
  r.origin_busy = origin_queue_depth >= kBusyOriginQueueDepth;
  if (failed.load()) return r;  // a failing cache drains, all of it, flat out
  r.target_lines = uint64_t{capacity} * dirty_target_pct.load() / 100;
  r.flat_out_lines = uint64_t{capacity} * dirty_low_pct.load() / 100;
  r.reserve_lines = ReserveLines(capacity);
  return r;
}

Result<uint64_t> Engine::Impl::CleanerTick(double seconds) {
  MutexLock lock(cleaner_tick_mu);
  cleaner_ticked.store(true);
  const WritebackController::Reading r = CleanerReading(seconds);
  // Cleaning ends in a synced record; with a failed store it cannot.
  const bool can_clean = !dev.metadata->failed();
  const uint64_t allowed = can_clean ? controller.Tick(r, seconds) : 0;
  const auto state = can_clean ? controller.state() : WritebackController::State::kIdle;
  stats.cleaner_state.store(static_cast<uint8_t>(state), std::memory_order_relaxed);
  const bool flat_out = state == WritebackController::State::kFlatOut;
  uint64_t cleaned = 0;
  Status error;
  while (cleaned < allowed) {
    {
      MutexLock stop_check(cleaner_mu);
      if (cleaner_stop) break;
    }
    Result<uint64_t> n = CleanPass(std::min<uint64_t>(allowed - cleaned, r.batch_lines));
    if (!n.ok()) error = n.status();
    if (!n.ok() || n.value() == 0) break;  // tried again at the next tick
    cleaned += n.value();
    UpdateWritebackRate();
    if (flat_out) std::this_thread::yield();  // let client I/O in between passes
  }
  controller.Spent(allowed, cleaned);
  UpdateWritebackRate();
  if (!error.ok()) return error;
  return cleaned;
}

void Engine::Impl::CleanerLoop() {
  NameThisThread("cachectl-clean");
  auto last = std::chrono::steady_clock::now();
  MutexLock lock(cleaner_mu);
  while (!cleaner_stop) {
    lock.WaitFor(cleaner_cv, kCleanerTick);
    if (cleaner_stop) break;
    lock.Unlock();
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last).count();
    last = now;
    (void)CleanerTick(seconds);  // errors are counted; the next tick tries again
    lock.Lock();
  }
}

void Engine::Impl::StartCleaner() {
  if (!config.background_cleaner) return;
  cleaner = std::thread([this] { CleanerLoop(); });
}

void Engine::Impl::StopCleaner() {
  {
    MutexLock lock(cleaner_mu);
    cleaner_stop = true;
  }
  cleaner_cv.notify_all();
  if (cleaner.joinable()) cleaner.join();
}

std::chrono::microseconds Engine::Impl::ThrottleDelay() const {
  // Nothing to wait for without the background cleaner (replay, tests):
  // only Flush cleans then.
  if (!config.background_cleaner || EffectiveMode() != CacheMode::kWriteBack) return {};
  const uint64_t dirty = stats.dirty_lines.load(std::memory_order_relaxed);
  const uint64_t limit = std::min(uint64_t{capacity} * dirty_high_pct.load() / 100, capacity - ReserveLines(capacity));
  if (dirty <= limit) return {};
  // Rises smoothly from nothing at the limit to kMaxThrottle with every
  // line dirty, gently at first (the cubic: an eighth of it half way):
  // writers slow down as the cleaner falls behind, and are never failed.
  const double x = double(std::min<uint64_t>(dirty, capacity) - limit) / double(capacity - limit);
  return std::chrono::microseconds(static_cast<int64_t>(double(kMaxThrottle.count()) * x * x * x));
}

std::chrono::microseconds Engine::Impl::Throttle(uint64_t offset, uint64_t length, bool bypass) {
  if (bypass || length == 0) return {};  // around the cache: no dirty line comes of it
  const std::chrono::microseconds delay = ThrottleDelay();
  if (delay.count() == 0) return {};
  // Only under pressure: a look at the dirty index, under the table's lock.
  if (slots.AllDirty(offset / line_size, (offset + length - 1) / line_size)) return {};
  LiveStats::Bump(stats.throttled_writes);
  return delay;
}

Result<uint64_t> Engine::RunCleanerTickForTest(double seconds) { return impl_->CleanerTick(seconds); }

}  // namespace cachecore
