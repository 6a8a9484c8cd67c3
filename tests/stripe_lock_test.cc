// The engine's stripe lock: exclusive against everything, shared among
// hits, released from any thread, and never starving the try-lockers (the
// cleaner and eviction only ever try).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

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

}  // namespace
}  // namespace cachecore
