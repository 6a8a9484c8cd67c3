#include "placement/heat_map.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace cachecore {

namespace {
constexpr char kMagicV1[8] = {'h', 'e', 'a', 't', 'm', 'a', 'p', '1'};  // 24 u32 a region
constexpr char kMagicV2[8] = {'h', 'e', 'a', 't', 'm', 'a', 'p', '2'};  // u32 now, 23 codes
constexpr size_t kHeader = 8 + sizeof(uint32_t) + sizeof(uint64_t) + sizeof(int64_t);
constexpr uint64_t kBlock = 4096;
constexpr uint32_t kSaturated = UINT32_MAX / 2;
constexpr uint32_t kExact = 2048;  // codes below are the count itself

// A past hour's count in 16 bits: below 2048 the count; above, 5 bits of
// exponent and 11 of mantissa after the leading one, rounded to nearest.
uint16_t HourCode(uint64_t count) {
  if (count < kExact) return static_cast<uint16_t>(count);
  int shift = std::bit_width(count) - 12;  // count >> shift is in [2048, 4096)
  uint64_t q = (count + ((uint64_t{1} << shift) >> 1)) >> shift;
  if (q == 2 * kExact) {
    q = kExact;
    ++shift;
  }
  if (shift + 1 > 31) return UINT16_MAX;
  return static_cast<uint16_t>(((shift + 1) << 11) | (q - kExact));
}

uint64_t HourCount(uint16_t code) {
  const uint32_t exponent = code >> 11, mantissa = code & (kExact - 1);
  return exponent == 0 ? mantissa : uint64_t{kExact + mantissa} << (exponent - 1);
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <typename T>
void Append(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
}  // namespace

HeatMap::HeatMap(uint64_t origin_size, uint32_t line_size, uint32_t max_regions) {
  uint64_t lines = (origin_size + line_size - 1) / line_size;
  uint64_t lines_per_region = (lines + max_regions - 1) / max_regions;
  region_bytes_ = std::max<uint64_t>(1, lines_per_region) * line_size;
  regions_ = static_cast<uint32_t>((origin_size + region_bytes_ - 1) / region_bytes_);
  now_ = std::make_unique<std::atomic<uint32_t>[]>(regions_);
  past_ = std::make_unique<std::atomic<uint16_t>[]>(size_t{regions_} * kPastHours);
  Clear();
}

void HeatMap::Clear() {
  for (uint32_t r = 0; r < regions_; ++r) now_[r].store(0, std::memory_order_relaxed);
  for (size_t i = 0; i < size_t{regions_} * kPastHours; ++i) past_[i].store(0, std::memory_order_relaxed);
}

void HeatMap::Record(uint64_t offset, uint64_t length) {
  const uint64_t end = offset + length;
  // Each region the request touches gets the blocks that fall in it.
  for (uint64_t at = offset; at < end;) {
    uint32_t region = RegionOf(at);
    if (region >= regions_) return;
    uint64_t stop = std::min(end, (uint64_t{region} + 1) * region_bytes_);
    uint32_t blocks = static_cast<uint32_t>((stop - at + kBlock - 1) / kBlock);
    std::atomic<uint32_t>& cell = now_[region];
    // Saturate rather than wrap: a region that busy is hot either way.
    if (cell.load(std::memory_order_relaxed) < kSaturated) cell.fetch_add(blocks, std::memory_order_relaxed);
    at = stop;
  }
}

void HeatMap::AdvanceTo(int64_t hour) {
  if (hour_ >= 0 && hour <= hour_) {
    if (hour_ - hour < int64_t{kHours}) return;  // the same hour, or the clock stepped back a little
    // The clock went back a day or more (or the stored hour was set ahead):
    // waiting for it to catch up would pile every access into one hour
    // for as long. The day starts afresh.
    Clear();
    hour_ = hour;
    return;
  }
  if (hour_ >= 0) {
    // The hour that ends becomes a past one (unless it is a day old
    // already); the hours passed over had nothing.
    const int64_t first_kept = std::max(hour_, hour - int64_t{kPastHours});
    for (uint32_t r = 0; r < regions_; ++r) {
      const uint32_t ended = now_[r].exchange(0, std::memory_order_relaxed);
      for (int64_t h = first_kept; h < hour; ++h) {
        Past(r, h).store(h == hour_ ? HourCode(ended) : 0, std::memory_order_relaxed);
      }
    }
  }
  hour_ = hour;
}

uint64_t HeatMap::DayHeat(uint32_t region) const {
  uint64_t sum = now_[region].load(std::memory_order_relaxed);
  for (uint32_t s = 0; s < kPastHours; ++s) {
    sum += HourCount(past_[size_t{region} * kPastHours + s].load(std::memory_order_relaxed));
  }
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
  std::string out(kMagicV2, sizeof(kMagicV2));
  Append(out, regions_);
  Append(out, region_bytes_);
  Append(out, hour_);
  for (uint32_t r = 0; r < regions_; ++r) Append(out, now_[r].load(std::memory_order_relaxed));
  for (size_t i = 0; i < size_t{regions_} * kPastHours; ++i) Append(out, past_[i].load(std::memory_order_relaxed));
  return out;
}

// Either format, and a map of finer regions over the same origin folded
// into this one's: each old region counts in the region holding its start
// (heat is a ranking aid; a region cut by a boundary lends it to one side).
bool HeatMap::Decode(const std::string& data) {
  if (data.size() < kHeader) return false;
  const bool v1 = std::memcmp(data.data(), kMagicV1, 8) == 0;
  if (!v1 && std::memcmp(data.data(), kMagicV2, 8) != 0) return false;
  const uint32_t regions = Load<uint32_t>(data.data() + 8);
  const uint64_t region_bytes = Load<uint64_t>(data.data() + 12);
  const int64_t hour = Load<int64_t>(data.data() + 20);
  const size_t body = v1 ? size_t{regions} * kHours * 4 : size_t{regions} * (4 + kPastHours * 2);
  if (data.size() != kHeader + body || hour < 0 || region_bytes == 0 || region_bytes > region_bytes_) return false;
  // The same origin: each map's last region holds its end.
  const uint64_t old_end = uint64_t{regions} * region_bytes, end = uint64_t{regions_} * region_bytes_;
  if (regions == 0 || old_end <= end - region_bytes_ || end <= old_end - region_bytes) return false;
  const char* p = data.data() + kHeader;
  std::vector<uint64_t> counts(size_t{regions_} * kHours, 0);
  for (uint32_t r = 0; r < regions; ++r) {
    const uint64_t into = std::min<uint64_t>(regions_ - 1, uint64_t{r} * region_bytes / region_bytes_);
    uint64_t* to = &counts[into * kHours];
    for (uint32_t i = 0; i < kPastHours; ++i) {
      const int64_t h = hour - kPastHours + i;
      if (h < 0) continue;
      to[i] += v1 ? Load<uint32_t>(p + (size_t{r} * kHours + h % kHours) * 4)
                  : HourCount(Load<uint16_t>(p + size_t{regions} * 4 + (size_t{r} * kPastHours + h % kPastHours) * 2));
    }
    to[kPastHours] += v1 ? Load<uint32_t>(p + (size_t{r} * kHours + hour % kHours) * 4) : Load<uint32_t>(p + size_t{r} * 4);
  }
  hour_ = hour;
  Assign(counts);
  return true;
}

void HeatMap::Assign(const std::vector<uint64_t>& counts) {
  for (uint32_t r = 0; r < regions_; ++r) {
    const uint64_t* from = &counts[size_t{r} * kHours];
    for (uint32_t i = 0; i < kPastHours; ++i) {
      Past(r, hour_ - kPastHours + i).store(HourCode(from[i]), std::memory_order_relaxed);
    }
    now_[r].store(static_cast<uint32_t>(std::min<uint64_t>(from[kPastHours], kSaturated)), std::memory_order_relaxed);
  }
}

}  // namespace cachecore
