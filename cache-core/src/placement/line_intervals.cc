#include "placement/line_intervals.h"

#include <algorithm>
#include <cstdlib>

namespace cachecore {

void LineIntervals::Add(uint64_t first, uint64_t end) {
  if (first >= end) return;
  Remove(first, end);  // whatever overlaps is replaced by the union below
  auto next = spans_.lower_bound(first);
  if (next != spans_.end() && next->first == end) {  // touches the next one
    end = next->second;
    total_ -= next->second - next->first;
    next = spans_.erase(next);
  }
  if (next != spans_.begin()) {
    auto prev = std::prev(next);
    if (prev->second == first) {  // touches the previous one
      first = prev->first;
      total_ -= prev->second - prev->first;
      spans_.erase(prev);
    }
  }
  spans_[first] = end;
  total_ += end - first;
}

std::vector<LineIntervals::Interval> LineIntervals::Remove(uint64_t first, uint64_t end) {
  std::vector<Interval> removed;
  if (first >= end) return removed;
  auto it = spans_.upper_bound(first);
  if (it != spans_.begin()) --it;
  while (it != spans_.end() && it->first < end) {
    auto [a, b] = *it;
    if (b <= first) {
      ++it;
      continue;
    }
    it = spans_.erase(it);
    total_ -= b - a;
    uint64_t cut_a = std::max(a, first), cut_b = std::min(b, end);
    removed.push_back({cut_a, cut_b});
    if (a < cut_a) {
      spans_[a] = cut_a;
      total_ += cut_a - a;
    }
    if (cut_b < b) {
      it = spans_.emplace(cut_b, b).first;
      total_ += b - cut_b;
      ++it;
    }
  }
  return removed;
}

bool LineIntervals::Contains(uint64_t line) const {
  auto it = spans_.upper_bound(line);
  if (it == spans_.begin()) return false;
  --it;
  return line < it->second;
}

std::optional<uint64_t> LineIntervals::NextAtOrAfter(uint64_t line) const {
  if (Contains(line)) return line;
  auto it = spans_.upper_bound(line);
  if (it == spans_.end()) return std::nullopt;
  return it->first;
}

uint64_t LineIntervals::Overlap(uint64_t first, uint64_t end) const {
  uint64_t n = 0;
  auto it = spans_.upper_bound(first);
  if (it != spans_.begin()) --it;
  for (; it != spans_.end() && it->first < end; ++it) {
    uint64_t a = std::max(it->first, first), b = std::min(it->second, end);
    if (a < b) n += b - a;
  }
  return n;
}

std::string LineIntervals::Encode() const {
  std::string out;
  // Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict for
  // `const char* + std::string&&` (GCC bug 105329).
  for (auto [a, b] : spans_) {
    if (!out.empty()) out += ',';
    out += std::to_string(a);
    out += '-';
    out += std::to_string(b);
  }
  return out;
}

Result<LineIntervals> LineIntervals::Decode(const std::string& text) {
  LineIntervals set;
  const char* p = text.c_str();
  while (*p != '\0') {
    char* dash = nullptr;
    uint64_t a = std::strtoull(p, &dash, 10);
    if (dash == p || *dash != '-') return Status::Corruption("pinned ranges: bad entry in '" + text + "'");
    char* stop = nullptr;
    uint64_t b = std::strtoull(dash + 1, &stop, 10);
    if (stop == dash + 1 || (*stop != ',' && *stop != '\0') || a >= b) {
      return Status::Corruption("pinned ranges: bad entry in '" + text + "'");
    }
    set.Add(a, b);
    if (*stop == ',' && stop[1] == '\0') return Status::Corruption("pinned ranges: bad entry in '" + text + "'");
    p = *stop == ',' ? stop + 1 : stop;
  }
  return set;
}

}  // namespace cachecore
