// StressWorkload: the threads of the concurrent crash model. Client threads
// issue random reads, writes (aligned and not, across lines, some FUA),
// write-zeroes, trims and syncs against one engine, each recorded in an
// ExpectedState before it is issued and acknowledged after it returns;
// reads are checked against it as they come back. A manager thread
// switches modes, flushes, syncs, pins, unpins and opens and closes the
// placement window beside them (the cleaner and the mover run on their own).
//
// A power cut happens under the workload: the owner calls PowerFails() just
// before it freezes the devices, so the errors that follow stop the threads
// quietly instead of failing the test; whatever was in flight stays allowed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cachecore/devices/reactor.h"
#include "cachecore/engine/engine.h"
#include "expected_state.h"

namespace cachecore::testing {

// The first thing any thread found wrong; the main thread reports it.
class FailureLog {
 public:
  // `sector`: the sector that read wrong, if that is what went wrong.
  void Add(const std::string& what, std::optional<uint64_t> sector = std::nullopt);
  bool failed() const { return failed_.load(); }
  std::string first() const;
  std::optional<uint64_t> sector() const;

 private:
  mutable std::mutex mu_;
  std::string first_;
  std::optional<uint64_t> sector_;
  std::atomic<bool> failed_{false};
};

struct WorkloadOptions {
  int clients = 4;
  uint32_t line_size = 4096;
  uint64_t seed = 1;  // with the cycle: the threads' random choices
  uint64_t hot_bytes = 1 << 20;  // most requests fall here: rewrites of cached lines
  // The clients' reads, writes, trims and syncs go through the engine's
  // asynchronous calls, issued on a reactor of the workload's (hits are
  // served there, beside the workers running the rest).
  bool asynchronous = false;
  // The volume's base in the cache's line space: the model's sectors are
  // the volume's, each request goes to base + its offset.
  uint64_t volume_base = 0;
};

class StressWorkload {
 public:
  StressWorkload(Engine& engine, ExpectedState& model, FailureLog& failures,
                 std::atomic<uint64_t>& next_id, const WorkloadOptions& options);
  ~StressWorkload();

  void Start();
  // Requests the clients have completed (or seen fail) so far.
  uint64_t ops_done() const { return ops_done_.load(); }
  // From now on errors are the power cut's, not the engine's.
  void PowerFails() { power_failed_.store(true); }
  // Stops every thread and waits for it.
  void Stop();
  uint64_t busy_flushes() const { return busy_flushes_.load(); }

 private:
  using Rng = std::mt19937_64;
  void ClientLoop(uint64_t seed);
  void ManagerLoop(uint64_t seed);
  // One random request; false when the thread should stop.
  bool ClientStep(Rng& rng);
  bool ManagerStep(Rng& rng);
  bool Write(Rng& rng, bool zeroes);
  bool Read(Rng& rng);
  bool Trim(Rng& rng);
  bool Sync(const char* who);
  bool PinOrUnpin(Rng& rng);
  bool TogglePlacement(Rng& rng);
  // [first sector, count) for a request.
  std::pair<uint64_t, uint64_t> RandomRange(Rng& rng) const;
  // Rounds the range out to whole 4 KiB blocks in aligned memory.
  void WholeBlocks(uint64_t& first, uint64_t& count, size_t& skew) const;
  // Judges a request's status: true to go on. An error before the power
  // failed is a failure of the engine.
  bool Outcome(const Status& s, const std::string& what);
  // Runs `call` on the reactor with a completion and waits for it.
  Status OnReactor(const std::function<void(EngineCompletion*)>& call);
  Status DoRead(uint64_t offset, uint8_t* data, uint64_t length);
  Status DoWrite(uint64_t offset, const uint8_t* data, uint64_t length, bool fua);
  Status DoTrim(uint64_t offset, uint64_t length);
  Status DoSync();

  Engine& engine_;
  ExpectedState& model_;
  FailureLog& failures_;
  std::atomic<uint64_t>& next_id_;
  const WorkloadOptions options_;
  std::atomic<bool> stop_{false}, power_failed_{false};
  std::atomic<uint64_t> ops_done_{0}, busy_flushes_{0};
  std::vector<std::thread> threads_;
  std::unique_ptr<Reactor> reactor_;  // asynchronous: its thread is the last of threads_
};

}  // namespace cachecore::testing
