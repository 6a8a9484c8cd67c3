// Asynchronous requests in tests: completions that count how and where
// they were answered, and a reactor to submit from. Header-only.
#pragma once


#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cachecore/devices/reactor.h"
#include "cachecore/engine/engine.h"
#include "support/block_io.h"

namespace cachecore::testing {

inline constexpr uint64_t kBlock = 4096;

// Counts completions, where they ran and how they ended; Wait() blocks
// until `expected` have come.
class Completions {
 public:
  struct One final : EngineCompletion {
    Completions* owner = nullptr;
    void Done(Status status) override { owner->Record(status); }
  };
  explicit Completions(size_t n) : ones_(n) {
    for (One& o : ones_) o.owner = this;
  }
  EngineCompletion* at(size_t i) { return &ones_[i]; }
  void Record(const Status& s) {
    std::lock_guard lock(mu_);
    ++done_;
    if (!s.ok()) ++failed_, last_error_ = s.ToString();
    if (Reactor::Current() != nullptr) ++on_reactor_;
    cv_.notify_all();
  }
  void Wait(size_t expected) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_ >= expected; });
  }
  bool WaitFor(size_t expected, std::chrono::seconds limit) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return done_ >= expected; });
  }
  size_t count() { std::lock_guard lock(mu_); return done_; }
  size_t failed() { std::lock_guard lock(mu_); return failed_; }
  size_t on_reactor() { std::lock_guard lock(mu_); return on_reactor_; }
  std::string last_error() { std::lock_guard lock(mu_); return last_error_; }

 private:
  std::vector<One> ones_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t done_ = 0, failed_ = 0, on_reactor_ = 0;
  std::string last_error_;
};

struct FnTask final : ReactorTask {
  std::function<void()> fn;
  explicit FnTask(std::function<void()> f) : fn(std::move(f)) {}
  void Run() override { fn(); }
};

// Runs `submit` on a fresh reactor, then keeps the reactor running until
// `completions` has seen `expected` (they may arrive from workers too).
inline void OnReactor(const std::function<void()>& submit, Completions& completions, size_t expected) {
  auto reactor = Reactor::Create();
  ASSERT_TRUE(reactor.ok());
  Reactor* r = reactor.value().get();
  std::thread runner([r] { r->Run(); });
  FnTask task(submit);
  r->Post(&task);
  completions.Wait(expected);
  r->Stop();
  runner.join();
}

// Writes `requests` requests of `blocks` blocks each from block `first` on
// a reactor, the last first.
inline void WriteOnReactor(Engine& engine, uint64_t first, size_t requests, size_t blocks, uint32_t tag,
                    bool fua, Completions& done) {
  const uint64_t bytes = blocks * kBlock;
  AlignedBuffer data(requests * bytes);
  FillPattern(data.data(), first * kBlock, requests * bytes, tag);
  OnReactor([&] {
    for (size_t i = requests; i-- > 0;) {
      engine.WriteAsync(first * kBlock + i * bytes, data.data() + i * bytes, bytes, fua, done.at(i));
    }
  }, done, requests);
}

}  // namespace cachecore::testing
