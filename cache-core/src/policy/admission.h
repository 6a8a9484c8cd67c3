// Admission: whether a request's lines may enter the cache. Two filters:
// a sequential cutoff per stream (large sequential streams bypass, as Open
// CAS and QNAP do) and an optional n-hit filter (a line is allocated on its
// nth miss). Thread-safe; the critical sections are a few comparisons.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace cachecore {

class Admission {
 public:
  Admission(uint64_t sequential_cutoff, uint32_t admit_after_misses);

  // Records the request in its stream; true when the stream has now moved
  // at least the cutoff sequentially (the request should bypass).
  bool SequentialBypass(uint64_t offset, uint64_t length) {
    return SequentialBypass(offset, length, cutoff_.load(std::memory_order_relaxed));
  }
  // The same with the cutoff of the request's volume (0: off).
  bool SequentialBypass(uint64_t offset, uint64_t length, uint64_t cutoff);
  // Records a miss of `line`; true when the line may be allocated now.
  bool AdmitOnMiss(uint64_t line);
  // Whether every miss is admitted (AdmitOnMiss records nothing and says yes).
  bool AdmitsEveryMiss() const { return admit_after_ <= 1; }
  void set_sequential_cutoff(uint64_t bytes) { cutoff_.store(bytes); }
  uint64_t sequential_cutoff() const { return cutoff_.load(); }

 private:
  struct Stream {
    uint64_t next_offset = UINT64_MAX;
    uint64_t bytes = 0;
    uint64_t last_use = 0;
  };
  std::atomic<uint64_t> cutoff_;
  uint32_t admit_after_;
  std::mutex mu_;
  std::array<Stream, 32> streams_{};
  uint64_t clock_ = 0;
  std::vector<uint8_t> miss_counts_;  // hashed counters for the n-hit filter
};

}  // namespace cachecore
