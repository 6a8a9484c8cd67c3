#include "placement/heat_map.h"

#include <algorithm>
#include <cstring>

namespace cachecore {

namespace {
constexpr char kMagic[8] = {'h', 'e', 'a', 't', 'm', 'a', 'p', '1'};
constexpr uint64_t kBlock = 4096;
constexpr uint32_t kSaturated = UINT32_MAX / 2;
}  // namespace

HeatMap::HeatMap(uint64_t origin_size, uint32_t line_size, uint32_t max_regions) {
  uint64_t lines = (origin_size + line_size - 1) / line_size;
  uint64_t lines_per_region = (lines + max_regions - 1) / max_regions;
  region_bytes_ = std::max<uint64_t>(1, lines_per_region) * line_size;
  regions_ = static_cast<uint32_t>((origin_size + region_bytes_ - 1) / region_bytes_);
  counts_ = std::make_unique<std::atomic<uint32_t>[]>(size_t{regions_} * kHours);
  for (size_t i = 0; i < size_t{regions_} * kHours; ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void HeatMap::Record(uint64_t offset, uint64_t length) {
  const uint32_t slot = slot_.load(std::memory_order_relaxed);
  const uint64_t end = offset + length;
  // Each region the request touches gets the blocks that fall in it.
  for (uint64_t at = offset; at < end;) {
    uint32_t region = RegionOf(at);
    if (region >= regions_) return;
    uint64_t stop = std::min(end, (uint64_t{region} + 1) * region_bytes_);
    uint32_t blocks = static_cast<uint32_t>((stop - at + kBlock - 1) / kBlock);
    std::atomic<uint32_t>& cell = Cell(region, slot);
    // Saturate rather than wrap: a region that busy is hot either way.
    if (cell.load(std::memory_order_relaxed) < kSaturated) cell.fetch_add(blocks, std::memory_order_relaxed);
    at = stop;
  }
}

void HeatMap::AdvanceTo(int64_t hour) {
  if (hour_ >= 0 && hour <= hour_) return;  // the same hour (or the clock went back)
  if (hour_ >= 0) {  // a fresh map holds zeros already
    for (int64_t h = std::max(hour_ + 1, hour - int64_t{kHours} + 1); h <= hour; ++h) {
      uint32_t slot = static_cast<uint32_t>(h % kHours);
      for (uint32_t r = 0; r < regions_; ++r) Cell(r, slot).store(0, std::memory_order_relaxed);
    }
  }
  hour_ = hour;
  slot_.store(static_cast<uint32_t>(hour % kHours), std::memory_order_relaxed);
}

uint64_t HeatMap::DayHeat(uint32_t region) const {
  uint64_t sum = 0;
  for (uint32_t h = 0; h < kHours; ++h) sum += Cell(region, h).load(std::memory_order_relaxed);
  return sum;
}

std::vector<std::pair<uint64_t, uint32_t>> HeatMap::Ranked(size_t limit) const {
  std::vector<std::pair<uint64_t, uint32_t>> out;
  for (uint32_t r = 0; r < regions_; ++r) {
    if (uint64_t h = DayHeat(r); h > 0) out.push_back({h, r});
  }
  auto hotter = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  limit = std::min(limit, out.size());
  std::partial_sort(out.begin(), out.begin() + limit, out.end(), hotter);
  out.resize(limit);
  return out;
}

std::string HeatMap::Encode() const {
  std::string out(kMagic, sizeof(kMagic));
  out.append(reinterpret_cast<const char*>(&regions_), sizeof(regions_));
  out.append(reinterpret_cast<const char*>(&region_bytes_), sizeof(region_bytes_));
  out.append(reinterpret_cast<const char*>(&hour_), sizeof(hour_));
  for (size_t i = 0; i < size_t{regions_} * kHours; ++i) {
    uint32_t v = counts_[i].load(std::memory_order_relaxed);
    out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  return out;
}

bool HeatMap::Decode(const std::string& data) {
  const size_t header = sizeof(kMagic) + sizeof(uint32_t) + sizeof(uint64_t) + sizeof(int64_t);
  if (data.size() != header + size_t{regions_} * kHours * sizeof(uint32_t)) return false;
  if (std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) return false;
  uint32_t regions = 0;
  uint64_t region_bytes = 0;
  int64_t hour = 0;
  const char* p = data.data() + sizeof(kMagic);
  std::memcpy(&regions, p, sizeof(regions));
  std::memcpy(&region_bytes, p + sizeof(regions), sizeof(region_bytes));
  std::memcpy(&hour, p + sizeof(regions) + sizeof(region_bytes), sizeof(hour));
  if (regions != regions_ || region_bytes != region_bytes_ || hour < 0) return false;
  p = data.data() + header;
  for (size_t i = 0; i < size_t{regions_} * kHours; ++i, p += sizeof(uint32_t)) {
    uint32_t v = 0;
    std::memcpy(&v, p, sizeof(v));
    counts_[i].store(v, std::memory_order_relaxed);
  }
  hour_ = hour;
  slot_.store(static_cast<uint32_t>(hour % kHours), std::memory_order_relaxed);
  return true;
}

}  // namespace cachecore
