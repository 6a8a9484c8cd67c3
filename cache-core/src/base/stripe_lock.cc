// Where requests parked on stripes wait: a fixed table of buckets, each a
// mutex and a list, chosen by the stripe's address (as WebKit's ParkingLot
// does), so that a stripe costs no more than its 32 bits.
#include "base/stripe_lock.h"

#include <array>
#include <cstdint>
#include <mutex>

namespace cachecore {

namespace {

struct Bucket {
  std::mutex mu;
  StripeWaiter* head = nullptr;  // parked on any stripe hashing here, oldest first
  StripeWaiter* tail = nullptr;
};

Bucket& BucketOf(const StripeLock* lock) {
  static std::array<Bucket, 256> buckets;
  const auto a = reinterpret_cast<uintptr_t>(lock);
  return buckets[(a >> 2) * 0x9E3779B97F4A7C15ull >> 56];
}

}  // namespace

bool StripeLock::park(StripeWaiter* waiter) {
  Bucket& bucket = BucketOf(this);
  std::lock_guard guard(bucket.mu);
  uint32_t s = state_.load(std::memory_order_relaxed);
  // The mark is set while the stripe is held, under the bucket's mutex: the
  // release that clears it takes the same mutex before calling back, so it
  // finds this waiter in the list.
  while (!(s & kParked)) {
    if ((s & (kWriter | kReaders)) == 0) return false;  // let go meanwhile
    if (state_.compare_exchange_weak(s, s | kParked, std::memory_order_relaxed)) break;
  }
  waiter->parked_on_ = this;
  waiter->next_parked_ = nullptr;
  if (bucket.tail != nullptr) bucket.tail->next_parked_ = waiter;
  else bucket.head = waiter;
  bucket.tail = waiter;
  return true;
}

void StripeLock::UnparkAll() {
  Bucket& bucket = BucketOf(this);
  StripeWaiter *mine = nullptr, *mine_last = nullptr;
  {
    std::lock_guard guard(bucket.mu);
    StripeWaiter *kept = nullptr, *kept_last = nullptr;
    for (StripeWaiter* w = bucket.head; w != nullptr;) {
      StripeWaiter* next = w->next_parked_;
      w->next_parked_ = nullptr;
      const bool ours = w->parked_on_ == this;
      StripeWaiter*& first = ours ? mine : kept;
      StripeWaiter*& last = ours ? mine_last : kept_last;
      if (last != nullptr) last->next_parked_ = w;
      else first = w;
      last = w;
      w = next;
    }
    bucket.head = kept;
    bucket.tail = kept_last;
  }
  // Called back outside the mutex, each once off the list: a waiter may
  // park again at once.
  for (StripeWaiter* w = mine; w != nullptr;) {
    StripeWaiter* next = w->next_parked_;
    w->next_parked_ = nullptr;
    w->parked_on_ = nullptr;
    w->Unparked();
    w = next;
  }
}

}  // namespace cachecore
