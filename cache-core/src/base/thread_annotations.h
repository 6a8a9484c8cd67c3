// Lock annotations for Clang's thread-safety analysis (-Wthread-safety), as
// Clang's documentation suggests (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html),
// and an annotated Mutex with its scoped lock, MutexLock: libstdc++'s
// std::mutex carries no annotations, so the analysis cannot follow it.
//
// With clang and -DCACHECTL_THREAD_SAFETY=ON (scripts/test.sh builds so, with
// -Werror), touching a GUARDED_BY field without its mutex, or calling a
// REQUIRES function without the lock, fails the build. Under GCC every macro
// is a no-op and Mutex is a std::mutex.
//
//   class Counter {
//    public:
//     void Add(int n) EXCLUDES(mu_) {
//       MutexLock lock(mu_);
//       AddLocked(n);
//     }
//    private:
//     void AddLocked(int n) REQUIRES(mu_) { total_ += n; }
//     Mutex mu_;
//     int total_ GUARDED_BY(mu_) = 0;
//   };
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#if defined(__clang__)
#define CACHECTL_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define CACHECTL_THREAD_ANNOTATION(x)  // no-op
#endif

// A type that is a lock (a "capability"); `x` names its kind in messages.
#define CAPABILITY(x) CACHECTL_THREAD_ANNOTATION(capability(x))
// An RAII type that holds a capability for its lifetime (MutexLock).
#define SCOPED_CAPABILITY CACHECTL_THREAD_ANNOTATION(scoped_lockable)

// A field read or written only with `x` held.
#define GUARDED_BY(x) CACHECTL_THREAD_ANNOTATION(guarded_by(x))
// A pointer field whose pointee is read or written only with `x` held.
#define PT_GUARDED_BY(x) CACHECTL_THREAD_ANNOTATION(pt_guarded_by(x))

// Lock ordering between capabilities.
#define ACQUIRED_BEFORE(...) CACHECTL_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) CACHECTL_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// The caller must hold the capabilities (exclusively, or at least shared).
#define REQUIRES(...) CACHECTL_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) CACHECTL_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))

// The function acquires (releases) the capabilities and returns holding them
// (not holding them). With no argument: `this`.
#define ACQUIRE(...) CACHECTL_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) CACHECTL_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) CACHECTL_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) CACHECTL_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
// Acquires the capabilities only when it returns the first argument (true).
#define TRY_ACQUIRE(...) CACHECTL_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

// The caller must not hold the capabilities (the function takes them).
#define EXCLUDES(...) CACHECTL_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// Checks (or promises) at run time that the capability is held; the analysis
// assumes it from there on.
#define ASSERT_CAPABILITY(x) CACHECTL_THREAD_ANNOTATION(assert_capability(x))
// The function returns a reference to the capability `x` (a lock accessor).
#define RETURN_CAPABILITY(x) CACHECTL_THREAD_ANNOTATION(lock_returned(x))
// Turns the analysis off for one function: say in a comment why it is safe.
#define NO_THREAD_SAFETY_ANALYSIS CACHECTL_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace cachecore {

// A std::mutex the analysis can see. Not recursive, not movable.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // Tells the analysis that the caller holds this mutex, where it cannot see
  // it (a lambda run under the lock, such as a condition's predicate). Checks
  // nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

  // The standard's Lockable names, so std::unique_lock<Mutex> and
  // std::scoped_lock still work; the analysis does not follow those
  // (they are not annotated): prefer MutexLock.
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction (std::lock_guard), may let
// it go and take it again in between (Unlock, Lock), and waits on a
// std::condition_variable with it (std::unique_lock's part).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Lets the mutex go for a while (it must be held) and takes it again (it
  // must not be); the destructor releases it only if held.
  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

  // Releases the mutex while blocked on `cv`; holds it again on return. The
  // predicate runs with the mutex held: start it with `mu.AssertHeld();` when
  // it reads GUARDED_BY fields.
  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  template <typename Predicate>
  void Wait(std::condition_variable& cv, Predicate done) {
    cv.wait(lock_, std::move(done));
  }
  // Releases the mutex while blocked on `cv` for at most `timeout` (or
  // until notified, or woken spuriously); holds it again on return.
  template <typename Rep, typename Period>
  void WaitFor(std::condition_variable& cv, std::chrono::duration<Rep, Period> timeout) {
    cv.wait_for(lock_, timeout);
  }
  // As Wait, for at most `timeout`; returns what the predicate returns last.
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(std::condition_variable& cv, std::chrono::duration<Rep, Period> timeout,
               Predicate done) {
    return cv.wait_for(lock_, timeout, std::move(done));
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace cachecore
