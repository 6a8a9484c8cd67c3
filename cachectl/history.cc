#include "history.h"

namespace cachectl {

namespace {
uint64_t Growth(uint64_t now, uint64_t before) { return now >= before ? now - before : now; }
}  // namespace

void History::Add(const HistoryMinute& cumulative) {
  std::lock_guard lock(mu_);
  if (last_) {
    const HistoryMinute& b = *last_;
    HistoryMinute m;
    m.minute_start = b.minute_start;  // the minute began at the previous sample
    m.read_hits = Growth(cumulative.read_hits, b.read_hits);
    m.read_misses = Growth(cumulative.read_misses, b.read_misses);
    m.write_hits = Growth(cumulative.write_hits, b.write_hits);
    m.write_misses = Growth(cumulative.write_misses, b.write_misses);
    m.dirty_lines = cumulative.dirty_lines;  // a level, not a count
    m.cleaner_writes = Growth(cumulative.cleaner_writes, b.cleaner_writes);
    m.cleaned_bytes = Growth(cumulative.cleaned_bytes, b.cleaned_bytes);
    if (ring_.size() < capacity_) {
      ring_.push_back(m);
    } else {
      ring_[next_] = m;
      next_ = (next_ + 1) % capacity_;
    }
  }
  last_ = cumulative;
}

std::vector<HistoryMinute> History::Minutes() const {
  std::lock_guard lock(mu_);
  std::vector<HistoryMinute> out(ring_.begin() + static_cast<std::ptrdiff_t>(next_), ring_.end());
  out.insert(out.end(), ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(next_));
  return out;
}

}  // namespace cachectl
