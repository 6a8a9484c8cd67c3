// StripeLock: the engine's per-stripe cell lock, held across the I/O of the
// lines hashing to the stripe. Exclusive for anything that may change a
// line (a reactor's writes and misses, the cleaner, the mover, eviction); shared,
// and only ever tried, for reads served on a reactor, so that hits on one
// line run side by side. Unlike std::mutex it belongs to no thread: it may
// be released by another thread than the one that took it, and a try by its
// holder simply fails (std::mutex leaves both undefined). A futex on 32
// bits: uncontended, each step is one atomic operation; a waiter sleeps in
// the kernel. A caller that must not sleep (a reactor's request) may park
// instead: it is called back when the holder lets go, and tries again.
// Not a public header.
#pragma once

#include <atomic>
#include <cstdint>

namespace cachecore {

class StripeLock;

// A request parked on a busy stripe (StripeLock::park). Unparked() runs on
// the thread that lets the stripe go, which may hold other locks (the slot
// table's, when an eviction lets a victim go): it must not block nor take a
// lock of the engine's, only hand the request back to where it runs.
class StripeWaiter {
 public:
  virtual void Unparked() = 0;

 protected:
  ~StripeWaiter() = default;

 private:
  friend class StripeLock;
  StripeWaiter* next_parked_ = nullptr;
  const StripeLock* parked_on_ = nullptr;
};

class StripeLock {
 public:
  StripeLock() = default;
  StripeLock(const StripeLock&) = delete;
  StripeLock& operator=(const StripeLock&) = delete;

  // A failed try while only shared holders are in marks the stripe wanted,
  // so that new shared tries stay away and a later try gets in: hits that
  // overlap without end would otherwise keep the cleaner and eviction out.
  // The mark goes with the next exclusive unlock, or when a request finds
  // the stripe free but marked (clear_marks_if_free).
  bool try_lock() {
    uint32_t s = state_.load(std::memory_order_relaxed);
    if ((s & ~kMarks) == 0 && state_.compare_exchange_strong(s, s | kWriter, std::memory_order_acquire)) {
      return true;
    }
    if ((s & kReaders) != 0 && !(s & kWriter)) state_.fetch_or(kWanted, std::memory_order_relaxed);
    return false;
  }
  // Exclusive only when nobody holds the stripe or waits for it (asleep or
  // parked): a reactor that takes stripes over and over would otherwise
  // keep a thread asleep in lock() out for good (try_lock gets in ahead of
  // sleepers). Marks nothing on failure.
  bool try_lock_unwanted() {
    uint32_t s = 0;
    return state_.compare_exchange_strong(s, kWriter, std::memory_order_acquire);
  }
  void lock() {
    uint32_t s = state_.load(std::memory_order_relaxed);
    while (true) {
      if ((s & ~kMarks) == 0) {
        // Keeps the marks: others may sleep or be parked still, the unlock wakes them.
        if (state_.compare_exchange_weak(s, s | kWriter, std::memory_order_acquire)) return;
      } else if (!(s & kWaiting)) {
        // Marks that someone sleeps, so the holder's release wakes it (and
        // so that new shared holders stay away: a writer is not starved).
        state_.compare_exchange_weak(s, s | kWaiting, std::memory_order_relaxed);
      } else {
        state_.wait(s, std::memory_order_relaxed);
        s = state_.load(std::memory_order_relaxed);
      }
    }
  }
  void unlock() {
    const uint32_t old = state_.exchange(0, std::memory_order_release);
    if (old & kWaiting) state_.notify_all();
    if (old & kParked) UnparkAll();
  }

  // Shared: fails when a writer holds the stripe or waits for it (asleep
  // or parked).
  bool try_lock_shared() {
    uint32_t s = state_.load(std::memory_order_relaxed);
    while ((s & (kWriter | kMarks)) == 0) {
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire)) return true;
    }
    return false;
  }
  void unlock_shared() {
    const uint32_t old = state_.fetch_sub(1, std::memory_order_release);
    if ((old & kReaders) != 1) return;
    if (old & kParked) {
      state_.fetch_and(~kParked, std::memory_order_relaxed);
      UnparkAll();
    }
    if (old & kWaiting) state_.notify_all();
  }

  // While the stripe is held, parks `waiter` until the holder lets go
  // (then waiter->Unparked() runs) and returns true. False, with nothing
  // parked, when nobody holds it by now: try again, or wait in lock().
  bool park(StripeWaiter* waiter);

  // When nobody holds the stripe and nobody sleeps for it, clears the mark
  // a failed try left and returns true: a reactor's request that can
  // neither get in nor park behind a holder then tries again at once. That
  // mark outlives the shared holders it was set against until an exclusive
  // unlock, and without this every request on the stripe would only be
  // retried later. False while someone holds the stripe or sleeps in
  // lock() for it (clearing a sleeper's mark would let requests overtake it
  // without end).
  bool clear_marks_if_free() {
    uint32_t s = state_.load(std::memory_order_relaxed);
    while ((s & (kWriter | kReaders | kWaiting | kParked)) == 0) {
      if (s == 0) return true;
      if (state_.compare_exchange_weak(s, 0, std::memory_order_relaxed)) return true;
    }
    return false;
  }

 private:
  // kWaiting: a thread sleeps in lock(); kParked: requests are parked;
  // kWanted: a try failed against shared holders (keeps new ones away).
  static constexpr uint32_t kWriter = 1u << 31, kWaiting = 1u << 30, kParked = 1u << 29,
                            kWanted = 1u << 28, kReaders = kWanted - 1,
                            kMarks = kWaiting | kParked | kWanted;
  // Calls back every waiter parked on this stripe.
  void UnparkAll();
  std::atomic<uint32_t> state_{0};
};

}  // namespace cachecore
