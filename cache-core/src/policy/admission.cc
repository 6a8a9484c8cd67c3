#include "policy/admission.h"

#include <algorithm>

namespace cachecore {

Admission::Admission(uint64_t sequential_cutoff, uint32_t admit_after_misses)
    : cutoff_(sequential_cutoff), admit_after_(admit_after_misses) {
  if (admit_after_ > 1) miss_counts_.assign(1 << 20, 0);
}

bool Admission::SequentialBypass(uint64_t offset, uint64_t length, uint64_t cutoff) {
  if (cutoff == 0) return false;
  std::lock_guard lock(mu_);
  ++clock_;
  Stream* match = nullptr;
  for (Stream& s : streams_) {
    if (s.next_offset == offset) { match = &s; break; }
  }
  if (match == nullptr) {
    match = &*std::min_element(streams_.begin(), streams_.end(),
                               [](const Stream& a, const Stream& b) { return a.last_use < b.last_use; });
    match->bytes = 0;
  }
  match->next_offset = offset + length;
  match->bytes += length;
  match->last_use = clock_;
  return match->bytes >= cutoff;
}

bool Admission::AdmitOnMiss(uint64_t line) {
  if (admit_after_ <= 1) return true;
  uint64_t h = line * 0x9E3779B97F4A7C15ull;
  std::lock_guard lock(mu_);
  uint8_t& count = miss_counts_[(h >> 40) % miss_counts_.size()];
  if (count < 255) ++count;
  if (count >= admit_after_) {
    count = 0;
    return true;
  }
  return false;
}

}  // namespace cachecore
