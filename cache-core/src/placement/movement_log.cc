#include "placement/movement_log.h"

#include <sstream>

namespace cachecore {

namespace {
constexpr int64_t kHour = 3600;

uint64_t Delta(uint64_t now, uint64_t before) { return now >= before ? now - before : now; }

// The counters of an hour (or of the totals) in one order, for sampling
// and encoding; fn gets each counter of `a` with its twin in `b`.
template <typename A, typename B, typename Fn>
void ZipCounters(A& a, B& b, Fn fn) {
  fn(a.promotions, b.promotions);
  fn(a.demotions, b.demotions);
  fn(a.cleaner_writes, b.cleaner_writes);
  fn(a.cleaned_bytes, b.cleaned_bytes);
  fn(a.placement_promotions, b.placement_promotions);
  fn(a.placement_demotions, b.placement_demotions);
  fn(a.pin_fills, b.pin_fills);
}
}  // namespace

void MovementLog::Sample(int64_t now, const MovementTotals& t) {
  int64_t start = now - now % kHour;
  MovementHour& h = hours_[static_cast<size_t>(start / kHour % 24)];
  if (h.hour_start != start) h = MovementHour{start};
  if (last_) {
    MovementTotals moved = t;
    ZipCounters(moved, *last_, [](uint64_t& now, uint64_t before) { now = Delta(now, before); });
    ZipCounters(h, moved, [](uint64_t& sum, uint64_t add) { sum += add; });
  }
  last_ = t;
}

std::vector<MovementHour> MovementLog::LastDay(int64_t now) const {
  std::vector<MovementHour> out;
  int64_t current = now - now % kHour;
  for (int64_t start = current - 23 * kHour; start <= current; start += kHour) {
    const MovementHour& h = hours_[static_cast<size_t>(start / kHour % 24)];
    out.push_back(h.hour_start == start ? h : MovementHour{start});
  }
  return out;
}

std::string MovementLog::Encode() const {
  std::string out;
  for (const MovementHour& h : hours_) {
    if (h.hour_start == 0) continue;
    out += std::to_string(h.hour_start);
    ZipCounters(h, h, [&](uint64_t v, uint64_t) {
      out += ' ';
      out += std::to_string(v);  // appended apart: GCC 12's false -Wrestrict (bug 105329)
    });
    out += "\n";
  }
  return out;
}

void MovementLog::Decode(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    MovementHour h;
    std::istringstream fields(line);
    bool ok = static_cast<bool>(fields >> h.hour_start) && h.hour_start > 0 && h.hour_start % kHour == 0;
    ZipCounters(h, h, [&](uint64_t& v, uint64_t) { ok = ok && static_cast<bool>(fields >> v); });
    if (ok) hours_[static_cast<size_t>(h.hour_start / kHour % 24)] = h;
  }
}

}  // namespace cachecore
