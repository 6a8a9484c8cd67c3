// The engine's stripe lock: exclusive against everything, shared among
// hits, released from any thread, and never starving the try-lockers (the
// cleaner and eviction only ever try).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "../cache-core/src/base/stripe_lock.h"

namespace cachecore {
namespace {

TEST(StripeLockTest, ExclusiveExcludesEveryone) {
  StripeLock lock;
  ASSERT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.try_lock());  // its holder too: no recursion, no undefined behaviour
  EXPECT_FALSE(lock.try_lock_shared());
  lock.unlock();
  EXPECT_TRUE(lock.try_lock_shared());
  EXPECT_TRUE(lock.try_lock_shared());  // hits share
  EXPECT_FALSE(lock.try_lock());
  lock.unlock_shared();
  lock.unlock_shared();
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

TEST(StripeLockTest, AFailedExclusiveTryKeepsNewSharedHoldersAway) {
  // Overlapping hits must not keep the cleaner out for ever: once a try
  // failed on shared holders, no new one gets in, and when they have gone
  // the next try succeeds.
  StripeLock lock;
  ASSERT_TRUE(lock.try_lock_shared());
  EXPECT_FALSE(lock.try_lock());
  EXPECT_FALSE(lock.try_lock_shared());
  lock.unlock_shared();
  ASSERT_TRUE(lock.try_lock());
  lock.unlock();
  EXPECT_TRUE(lock.try_lock_shared());  // the mark went with the exclusive unlock
  lock.unlock_shared();
}

TEST(StripeLockTest, ReleasedByAnotherThreadWakesAWaiter) {
  StripeLock lock;
  lock.lock();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    lock.lock();
    got = true;
    lock.unlock();
  });
  std::thread releaser([&] { lock.unlock(); });  // not the thread that took it
  releaser.join();
  waiter.join();
  EXPECT_TRUE(got);
}

TEST(StripeLockTest, WaitersSleepUntilTheLastSharedHolderLeaves) {
  StripeLock lock;
  ASSERT_TRUE(lock.try_lock_shared());
  ASSERT_TRUE(lock.try_lock_shared());
  std::atomic<int> inside{0};
  std::thread writer([&] {
    lock.lock();
    inside = 1;
    lock.unlock();
  });
  while (lock.try_lock_shared()) lock.unlock_shared();  // until the writer has marked it
  lock.unlock_shared();
  EXPECT_EQ(inside.load(), 0);
  lock.unlock_shared();
  writer.join();
  EXPECT_EQ(inside.load(), 1);
}

TEST(StripeLockTest, CountsHoldManyThreadsAtOnce) {
  StripeLock lock;
  long counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        lock.lock();
        ++counter;
        lock.unlock();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, 80000);
}

// ---- parking: a request that may not sleep waits as a callback

struct CountingWaiter final : StripeWaiter {
  std::atomic<int> woken{0};
  void Unparked() override { ++woken; }
};

TEST(StripeLockTest, AParkedWaiterIsCalledBackOnceWhenTheHolderLetsGo) {
  StripeLock lock;
  CountingWaiter a, b;
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(lock.park(&a));
  ASSERT_TRUE(lock.park(&b));
  EXPECT_FALSE(lock.try_lock_shared());   // parked waiters keep new hits away
  EXPECT_FALSE(lock.try_lock_unwanted());
  EXPECT_EQ(a.woken + b.woken, 0);
  lock.unlock();
  EXPECT_EQ(a.woken.load(), 1);
  EXPECT_EQ(b.woken.load(), 1);
  // Called back once: the next release finds nobody parked.
  ASSERT_TRUE(lock.try_lock_unwanted());
  lock.unlock();
  EXPECT_EQ(a.woken.load(), 1);
}

TEST(StripeLockTest, TheLastSharedHolderCallsBackTheParked) {
  StripeLock lock;
  CountingWaiter w;
  ASSERT_TRUE(lock.try_lock_shared());
  ASSERT_TRUE(lock.try_lock_shared());
  ASSERT_TRUE(lock.park(&w));
  lock.unlock_shared();
  EXPECT_EQ(w.woken.load(), 0);
  lock.unlock_shared();
  EXPECT_EQ(w.woken.load(), 1);
  EXPECT_TRUE(lock.try_lock_unwanted());  // the mark went with them
  lock.unlock();
}

// A failed try's mark outlives the shared holders it was set against; a
// reactor's request that then finds nobody to park behind clears it, and
// gets in. While the stripe is held nothing is cleared.
TEST(StripeLockTest, MarksLeftOnAFreeStripeAreClearedOnlyWhenItIsFree) {
  StripeLock lock;
  ASSERT_TRUE(lock.try_lock_shared());
  EXPECT_FALSE(lock.try_lock());  // marks it wanted
  EXPECT_FALSE(lock.clear_marks_if_free());  // held: the mark stays
  EXPECT_FALSE(lock.try_lock_shared());
  lock.unlock_shared();
  EXPECT_FALSE(lock.try_lock_shared());  // free, but marked
  EXPECT_FALSE(lock.try_lock_unwanted());
  CountingWaiter w;
  EXPECT_FALSE(lock.park(&w));  // nobody to park behind
  EXPECT_TRUE(lock.clear_marks_if_free());
  EXPECT_TRUE(lock.try_lock_unwanted());
  lock.unlock();
  EXPECT_TRUE(lock.clear_marks_if_free());  // free and unmarked
}

TEST(StripeLockTest, ParkingOnAFreeStripeIsRefused) {
  StripeLock lock;
  CountingWaiter w;
  EXPECT_FALSE(lock.park(&w));
  EXPECT_EQ(w.woken.load(), 0);
}

// Waiters parked on other stripes (sharing a bucket or not) stay parked.
TEST(StripeLockTest, ALetGoCallsBackOnlyItsOwnWaiters) {
  std::vector<StripeLock> locks(512);
  std::vector<CountingWaiter> waiters(512);
  for (size_t i = 0; i < locks.size(); ++i) {
    ASSERT_TRUE(locks[i].try_lock());
    ASSERT_TRUE(locks[i].park(&waiters[i]));
  }
  locks[7].unlock();
  for (size_t i = 0; i < waiters.size(); ++i) EXPECT_EQ(waiters[i].woken.load(), i == 7 ? 1 : 0) << i;
  for (size_t i = 0; i < locks.size(); ++i) {
    if (i != 7) locks[i].unlock();
  }
  for (const CountingWaiter& w : waiters) EXPECT_EQ(w.woken.load(), 1);
}

// A waiter parks while the holder lets go on another thread: it is either
// refused (the stripe is free: try again) or called back, never left parked.
TEST(StripeLockTest, ParkingRacingARelease) {
  for (int round = 0; round < 20000; ++round) {
    StripeLock lock;
    CountingWaiter w;
    ASSERT_TRUE(lock.try_lock());
    std::thread holder([&] { lock.unlock(); });
    const bool parked = lock.park(&w);
    holder.join();
    ASSERT_EQ(w.woken.load(), parked ? 1 : 0) << "round " << round;
  }
}

}  // namespace
}  // namespace cachecore
