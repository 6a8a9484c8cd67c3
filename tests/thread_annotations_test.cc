// The annotated Mutex and MutexLock of cache-core/src/thread_annotations.h:
// they lock as std::mutex does, and this file compiles without a warning
// under clang's -Wthread-safety (the clang build in scripts/test.sh).
#include <gtest/gtest.h>

#include <condition_variable>
#include <thread>
#include <vector>

#include "../cache-core/src/base/thread_annotations.h"

namespace cachecore {
namespace {

class Counter {
 public:
  void Add(int n) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    AddLocked(n);
  }
  int Get() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return total_;
  }
  // Waits until the total reaches `n`, then takes `n` away.
  void Take(int n) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    lock.Wait(changed_, [&] {
      mu_.AssertHeld();
      return total_ >= n;
    });
    total_ -= n;
  }
  // Lets the lock go in the middle and takes it again.
  void AddTwiceReleasingBetween(int n) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    AddLocked(n);
    lock.Unlock();
    lock.Lock();
    AddLocked(n);
  }
  Mutex& mu() RETURN_CAPABILITY(mu_) { return mu_; }

 private:
  void AddLocked(int n) REQUIRES(mu_) {
    total_ += n;
    changed_.notify_all();
  }

  Mutex mu_;
  std::condition_variable changed_;
  int total_ GUARDED_BY(mu_) = 0;
};

TEST(ThreadAnnotationsTest, MutexLockExcludesOtherThreads) {
  Counter c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c] {
      for (int i = 0; i < 10000; ++i) c.Add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Get(), 40000);
}

TEST(ThreadAnnotationsTest, TryLockFailsWhileHeld) {
  Counter c;
  c.mu().Lock();
  std::thread other([&c] { EXPECT_FALSE(c.mu().TryLock()); });
  other.join();
  c.mu().Unlock();
  if (c.mu().TryLock()) {
    c.mu().Unlock();
  } else {
    ADD_FAILURE() << "TryLock failed on a free mutex";
  }
}

TEST(ThreadAnnotationsTest, UnlockAndLockAgain) {
  Counter c;
  c.AddTwiceReleasingBetween(3);
  EXPECT_EQ(c.Get(), 6);
}

TEST(ThreadAnnotationsTest, WaitReleasesTheMutexUntilThePredicateHolds) {
  Counter c;
  std::thread taker([&c] { c.Take(5); });
  for (int i = 0; i < 5; ++i) c.Add(1);  // each Add needs the mutex the taker waits with
  taker.join();
  EXPECT_EQ(c.Get(), 0);
}

}  // namespace
}  // namespace cachecore
