// Pins and placement settings: what the user asks for, checked, saved in
// the store and put in force; and the reports of pins and movement. The
// mover that acts on them is in engine_mover.cc.
#include <algorithm>
#include <cstdio>

#include "engine/engine_impl.h"

namespace cachecore {

namespace {

const char kPinsKey[] = "pins";
const char kWindowKey[] = "placement_window";
const char kRateKey[] = "placement_rate";
const char kHeatKey[] = "heat";
const char kMovementKey[] = "movement";
constexpr size_t kHottestShown = 10;

// The lines a byte range touches, rounded out: [first, end).
Result<std::pair<uint64_t, uint64_t>> LinesOf(const Engine::Impl& impl, uint64_t offset, uint64_t length) {
  if (length == 0) return Status::InvalidArgument("the range is empty");
  if (impl.volumes.Find(offset, length) == nullptr) {
    const LiveVolume* v = impl.volumes.Find(offset);
    return Status::OutOfRange(v ? "the range ends beyond the volume (" + std::to_string(v->size) + " bytes)"
                                : "the range starts in no volume");
  }
  return std::pair{offset / impl.line_size, (offset + length + impl.line_size - 1) / impl.line_size};
}

std::string Mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

uint64_t Engine::Impl::LinesBytes(uint64_t first, uint64_t end) const {
  // The last line of a volume may be cut short by its end.
  const LiveVolume* v = volumes.Find(first * line_size);
  const uint64_t limit = v ? v->base + v->size : end * line_size;
  return std::min(end * line_size, limit) - first * line_size;
}

void Engine::Impl::LoadPlacement() {
  MetadataStore* m = dev.metadata;
  if (Result<std::string> v = m->GetConfig(kPinsKey); v.ok()) {
    // A damaged entry cannot pin the wrong data (pins only keep lines
    // resident); it is dropped, and the next pin rewrites it.
    if (Result<LineIntervals> p = LineIntervals::Decode(v.value()); p.ok()) {
      slots.ReplacePins(std::move(p.value()), {}, true);  // nothing is cached yet
    }
  }
  if (Result<std::string> v = m->GetConfig(kHeatKey); v.ok()) (void)heat.Decode(v.value());
  pins_changed.store(slots.PinnedLines() > 0);
  MutexLock lock(placement_mu);  // nothing runs yet; for the analysis
  if (Result<std::string> v = m->GetConfig(kWindowKey); v.ok()) {
    if (Result<PlacementWindow> w = ParsePlacementWindow(v.value()); w.ok()) placement.window = w.value();
  }
  if (Result<std::string> v = m->GetConfig(kRateKey); v.ok()) {
    uint64_t rate = std::strtoull(v->c_str(), nullptr, 10);
    if (rate > 0) placement.rate_bytes_per_s = rate;
  }
  if (Result<std::string> v = m->GetConfig(kMovementKey); v.ok()) movement.Decode(v.value());
}

Status Engine::Impl::ResetPlacement(MetadataStore* m) {
  for (auto [key, value] : {std::pair{kPinsKey, ""}, std::pair{kWindowKey, "off"}, std::pair{kHeatKey, ""},
                            std::pair{kMovementKey, ""}}) {
    CACHECORE_RETURN_IF_ERROR(m->PutConfig(key, value, false));
  }
  return m->PutConfig(kRateKey, std::to_string(kDefaultPlacementRate), false);
}

void Engine::Impl::SavePlacementHistory(bool sync) {
  std::string moved;
  {
    MutexLock lock(placement_mu);
    moved = movement.Encode();
  }
  // History only: a failure costs the record of a day, never data.
  if (!dev.metadata->PutConfig(kHeatKey, heat.Encode(), false).ok() ||
      !dev.metadata->PutConfig(kMovementKey, moved, sync).ok()) {
    LiveStats::Bump(stats.metadata_err);
  }
}

MovementTotals Engine::Impl::MovementNow() const {
  MovementTotals t;
  t.promotions = stats.promotions.load();
  t.demotions = stats.evictions.load();
  t.cleaner_writes = stats.cleaner_writes.load();
  t.cleaned_bytes = stats.cleaned_blocks.load() * kBlockSize;
  t.placement_promotions = placement_promotions.load();
  t.placement_demotions = placement_demotions.load();
  t.pin_fills = pin_fills.load();
  return t;
}

Status Engine::Impl::ChangePins(uint64_t offset, uint64_t length, const PinEdit& edit,
                                bool pinning) {
  if (shut_down.load()) return Status::Busy("the cache is shut down");
  Result<std::pair<uint64_t, uint64_t>> lines = LinesOf(*this, offset, length);
  if (!lines.ok()) return lines.status();
  MutexLock pin_lock(pin_mu);
  LineIntervals next = slots.Pins();
  Result<std::vector<LineIntervals::Interval>> changed = edit(next, lines->first, lines->second);
  if (!changed.ok()) return changed.status();
  CACHECORE_RETURN_IF_ERROR(dev.metadata->PutConfig(kPinsKey, next.Encode(), true));
  slots.ReplacePins(std::move(next), changed.value(), pinning);
  if (pinning) {
    pins_changed.store(true);
    mover_cv.notify_all();
  }
  return Status::Ok();
}

Status Engine::Pin(uint64_t offset, uint64_t length) {
  Impl& im = *impl_;
  auto add = [&](LineIntervals& next, uint64_t first, uint64_t end) -> Result<std::vector<LineIntervals::Interval>> {
    const uint64_t pinned = next.total();
    next.Add(first, end);
    if (next.total() > im.pin_limit_lines) {
      return Status::Busy("pinning this range would pin " + Mib(next.total() * im.line_size) +
                          ", more than the limit of " + Mib(im.pin_limit_lines * im.line_size) + " (" +
                          std::to_string(kPinLimitPct) + " % of the cache; " + Mib(pinned * im.line_size) +
                          " pinned now)");
    }
    // Lines pinned already are out of the policy: taking them out again changes nothing.
    return std::vector<LineIntervals::Interval>{{first, end}};
  };
  return im.ChangePins(offset, length, add, true);
}

Status Engine::Unpin(uint64_t offset, uint64_t length) {
  auto remove = [](LineIntervals& next, uint64_t first, uint64_t end) -> Result<std::vector<LineIntervals::Interval>> {
    std::vector<LineIntervals::Interval> removed = next.Remove(first, end);
    if (removed.empty()) return Status::NotFound("nothing in that range is pinned");
    return removed;  // only what was pinned goes back to the policy
  };
  return impl_->ChangePins(offset, length, remove, false);
}

PinReport Engine::pins() const {
  Impl& im = *impl_;
  PinReport r;
  for (const SlotTable::PinnedInterval& pin : im.slots.PinnedWithResidency()) {
    PinnedRange p{pin.first * im.line_size, im.LinesBytes(pin.first, pin.end), pin.cached * im.line_size};
    p.resident_bytes = std::min(p.resident_bytes, p.length);
    r.pinned_bytes += p.length;
    r.resident_bytes += p.resident_bytes;
    r.ranges.push_back(p);
  }
  r.limit_bytes = im.pin_limit_lines * im.line_size;
  return r;
}

Status Engine::SetPlacement(const PlacementSettings& settings) {
  Impl& im = *impl_;
  if (settings.rate_bytes_per_s == 0) {
    return Status::InvalidArgument("the placement rate must be more than 0 bytes a second");
  }
  MetadataStore* m = im.dev.metadata;
  CACHECORE_RETURN_IF_ERROR(
      m->PutConfig(kWindowKey, settings.window ? FormatPlacementWindow(*settings.window) : "off", false));
  CACHECORE_RETURN_IF_ERROR(m->PutConfig(kRateKey, std::to_string(settings.rate_bytes_per_s), true));
  {
    MutexLock lock(im.placement_mu);
    im.placement = settings;
  }
  im.mover_cv.notify_all();
  return Status::Ok();
}

PlacementSettings Engine::placement() const {
  MutexLock lock(impl_->placement_mu);
  return impl_->placement;
}

MovementReport Engine::movement() const {
  Impl& im = *impl_;
  MovementReport r;
  const int64_t now = im.clock->NowSeconds();
  {
    MutexLock lock(im.placement_mu);
    MovementLog log = im.movement;
    log.Sample(now, im.MovementNow());  // this hour up to now
    r.hours = log.LastDay(now);
  }
  r.region_bytes = im.heat.region_bytes();
  std::vector<std::pair<uint64_t, uint32_t>> heat = im.heat.Ranked(kHottestShown);
  const size_t shown = heat.size();
  const uint64_t lines_per_region = r.region_bytes / im.line_size;
  for (size_t i = 0; i < shown; ++i) {
    uint64_t first = heat[i].second * lines_per_region;
    uint64_t end = std::min(first + lines_per_region, im.OriginLines());
    if (end <= first) continue;  // past the line space now (a volume removed)
    uint64_t bytes = im.LinesBytes(first, end);
    r.hottest.push_back({first * im.line_size, bytes, heat[i].first,
                         std::min(bytes, im.slots.CachedLines(first, end) * im.line_size)});
  }
  return r;
}

bool PlacementWindow::Contains(uint32_t minute) const {
  if (start_minute < end_minute) return minute >= start_minute && minute < end_minute;
  return minute >= start_minute || minute < end_minute;  // across midnight
}

Result<PlacementWindow> ParsePlacementWindow(const std::string& text) {
  unsigned h1 = 0, m1 = 0, h2 = 0, m2 = 0;
  char tail = 0;
  const std::string want = "placement window '" + text + "': ";
  if (std::sscanf(text.c_str(), "%2u:%2u-%2u:%2u%c", &h1, &m1, &h2, &m2, &tail) != 4 || text.size() != 11) {
    return Status::InvalidArgument(want + "expected HH:MM-HH:MM, e.g. 01:00-05:00");
  }
  if (h1 > 23 || m1 > 59 || h2 > 24 || m2 > 59 || (h2 == 24 && m2 != 0)) {
    return Status::InvalidArgument(want + "hours are 00-23 (24:00 as an end), minutes 00-59");
  }
  PlacementWindow w{h1 * 60 + m1, h2 * 60 + m2};
  if (w.start_minute == w.end_minute) {
    return Status::InvalidArgument(want + "the window is empty (for all day use 00:00-24:00)");
  }
  return w;
}

std::string FormatPlacementWindow(const PlacementWindow& w) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%02u:%02u-%02u:%02u", w.start_minute / 60, w.start_minute % 60,
                w.end_minute / 60, w.end_minute % 60);
  return buf;
}

}  // namespace cachecore
