// The mover: a background thread that keeps time for the heat map and the
// movement log, fills pinned lines, and inside the placement window brings
// the hottest regions of the last day into the cache, moving cold lines out
// to make room, and cleans what is dirty (so the busy hours start with room
// for writes). Everything it moves is bounded by the placement rate.
#include <algorithm>
#include <chrono>

#include "cachecore/metadata/checksum.h"
#include "base/thread_name.h"
#include "engine/engine_impl.h"

namespace cachecore {

namespace {
using SteadyClock = std::chrono::steady_clock;  // for the tick and the rate
constexpr auto kTick = std::chrono::milliseconds(200);
// A filled pass over the pins is checked again after this long (a pinned
// line can lose blocks to a discard or a cache error).
constexpr auto kPinRecheck = std::chrono::seconds(60);
constexpr auto kRankEvery = std::chrono::seconds(60);
// Cached lines looked at per tick, so a large resident set costs little CPU.
constexpr uint64_t kChecksPerTick = 4096;
}  // namespace

struct MoverState {
  explicit MoverState(uint32_t line_size) : buffer(line_size) {}
  AlignedBuffer buffer;
  int64_t hour = -1;  // the hour whose history was saved last
  // Pins: the next line to look at, and whether the last pass found all resident.
  uint64_t pin_cursor = 0;
  bool pass_filled = false;
  SteadyClock::time_point pins_idle_until{};
  // Placement: hot regions, hottest first, and where promotion has got to.
  std::vector<uint32_t> hot;
  std::vector<uint8_t> in_hot;  // by region
  SteadyClock::time_point ranked_at{};
  bool ranked = false;
  size_t hot_index = 0;
  uint64_t hot_line = 0;  // lines into hot[hot_index]
  uint32_t demote_cursor = 0;
};

void Engine::Impl::StartMover() {
  mover = std::thread([this] { MoverLoop(); });
}

void Engine::Impl::StopMover() {
  // Never started (an open that failed writes nothing) or stopped already.
  if (!mover.joinable()) return;
  {
    MutexLock lock(mover_mu);
    mover_stop = true;
  }
  mover_cv.notify_all();
  mover.join();
  SavePlacementHistory(false);  // the shutdown's sync makes it durable
}

void Engine::Impl::MoverLoop() {
  NameThisThread("cachectl-mover");
  MoverState state(line_size);
  double tokens = 0;
  auto last = SteadyClock::now();
  MutexLock lock(mover_mu);
  while (!mover_stop) {
    lock.WaitFor(mover_cv, kTick);
    if (mover_stop) break;
    lock.Unlock();
    const int64_t now = clock->NowSeconds();  // the hour, the sample and the window
    heat.AdvanceTo(now / 3600);
    // The rate and the window of one setting: read apart, a tick could
    // pair a new window with the old rate's tokens (a burst at the old rate).
    uint64_t rate;
    std::optional<PlacementWindow> window;
    {
      MutexLock p(placement_mu);
      movement.Sample(now, MovementNow());
      rate = placement.rate_bytes_per_s;
      window = placement.window;
    }
    if (state.hour != now / 3600) {
      if (state.hour >= 0) SavePlacementHistory(false);
      state.hour = now / 3600;
    }
    auto t = SteadyClock::now();
    // Tokens for at most one second of movement: an idle spell is no licence for a burst.
    tokens = std::min<double>(static_cast<double>(std::max<uint64_t>(rate, line_size)),
                              tokens + static_cast<double>(rate) * std::chrono::duration<double>(t - last).count());
    last = t;
    // Moving lines changes records; with a failed store nothing moves.
    if (EffectiveMode() != CacheMode::kPassThrough && !dev.metadata->failed()) {
      tokens -= static_cast<double>(FillPins(state, static_cast<uint64_t>(tokens)));
      if (window && window->Contains(clock->LocalMinuteOfDay(now))) {  // the daemon's local time
        // Cleaning first, in sorted, coalesced passes: the cold lines that
        // placement then demotes are clean, with no origin flush apiece.
        tokens -= static_cast<double>(CleanInWindow(static_cast<uint64_t>(tokens)));
        tokens -= static_cast<double>(PlaceByHeat(state, static_cast<uint64_t>(tokens)));
      }
    }
    lock.Lock();
  }
}

uint64_t Engine::Impl::FillLine(uint64_t line, uint8_t* buffer) {
  std::lock_guard cell(StripeOf(line));
  if (shut_down.load() || EffectiveMode() == CacheMode::kPassThrough) return 0;
  // Checked under the stripe: a volume being removed drops its lines under
  // theirs, so none is filled again behind it.
  const LiveVolume* v = volumes.Find(line * line_size);
  if (v == nullptr || !v->accepting.load()) return 0;
  const uint32_t blocks = static_cast<uint32_t>(
      std::min<uint64_t>(blocks_per_line, (v->base + v->size - line * line_size) / kBlockSize));
  std::optional<uint32_t> slot = slots.Find(line);
  if (slot && slots.ValidBlocks(*slot) >= blocks) return 0;
  const size_t my_stripe = StripeIndex(line);
  if (!slot) slot = TakeSlot(line, {&my_stripe, 1}, {});
  if (!slot) return 0;
  uint64_t moved = 0;
  for (uint32_t b = 0; b < blocks;) {
    if (slots.Flags(*slot, b) & kValid) {
      ++b;
      continue;
    }
    uint32_t e = b + 1;
    while (e < blocks && !(slots.Flags(*slot, e) & kValid)) ++e;
    uint8_t* data = buffer + size_t{b} * kBlockSize;
    const uint64_t bytes = uint64_t{e - b} * kBlockSize;
    // Background work: the origin itself, not the meter of client I/O.
    if (!raw_origin->Read(OriginOffset(line, b), data, bytes).ok()) {
      LiveStats::Bump(stats.origin_read_err);
      break;
    }
    if (!dev.cache->Write(SlotOffset(*slot, b), data, bytes).ok()) {
      CountCacheError(stats.cache_write_err);
      break;
    }
    const uint64_t epoch = slots.FlushesStarted();
    for (uint32_t x = b; x < e; ++x) {
      slots.MarkValidClean(*slot, x, CheckOf(buffer + size_t{x} * kBlockSize, *slot, x), epoch);
    }
    moved += bytes;
    b = e;
  }
  if (moved > 0) (void)PutRecord(*slot, false, true);  // counted; clean blocks, the origin has them
  RecordBatch batch;
  slots.ReleaseIfEmpty(*slot, batch);  // nothing could be read into a new slot
  if (!batch.empty()) (void)Commit(batch, false);
  return moved;
}

uint64_t Engine::Impl::FillPins(MoverState& st, uint64_t budget) {
  if (pins_changed.exchange(false)) {
    st.pin_cursor = 0;
    st.pass_filled = false;
    st.pins_idle_until = {};
  }
  if (SteadyClock::now() < st.pins_idle_until) return 0;
  uint64_t used = 0, checked = 0;
  while (used + line_size <= budget && checked < kChecksPerTick) {
    std::optional<uint64_t> line = slots.NextPinAtOrAfter(st.pin_cursor);
    if (!line) {  // a pass is complete; rest when it found everything there
      if (!st.pass_filled) st.pins_idle_until = SteadyClock::now() + kPinRecheck;
      st.pin_cursor = 0;
      st.pass_filled = false;
      break;
    }
    st.pin_cursor = *line + 1;
    ++checked;
    if (uint64_t moved = FillLine(*line, st.buffer.data()); moved > 0) {
      used += moved;
      st.pass_filled = true;
      LiveStats::Bump(pin_fills);
    }
  }
  return used;
}

void Engine::Impl::RankRegions(MoverState& st) {
  std::vector<std::pair<uint64_t, uint32_t>> heats = heat.Ranked();
  uint64_t room = capacity - std::min<uint64_t>(capacity, slots.PinnedLines());
  // The hottest regions that fit in the cache beside the pins.
  const uint64_t lines_per_region = heat.region_bytes() / line_size;
  st.hot.clear();
  st.in_hot.assign(heat.regions(), 0);
  for (auto [h, region] : heats) {
    if (room == 0) break;
    st.hot.push_back(region);
    st.in_hot[region] = 1;
    room -= std::min(room, lines_per_region);
  }
  st.hot_index = 0;
  st.hot_line = 0;
  st.ranked = true;
  st.ranked_at = SteadyClock::now();
}

uint64_t Engine::Impl::PlaceByHeat(MoverState& st, uint64_t budget) {
  if (!st.ranked || SteadyClock::now() - st.ranked_at >= kRankEvery) RankRegions(st);
  const uint64_t lines_per_region = heat.region_bytes() / line_size;
  const uint64_t origin_lines = OriginLines();
  uint64_t used = 0, checked = 0;
  while (used + line_size <= budget && checked < kChecksPerTick && st.hot_index < st.hot.size()) {
    const uint64_t line = uint64_t{st.hot[st.hot_index]} * lines_per_region + st.hot_line;
    // On to the next region after its last line (the volume's last region may be short).
    if (++st.hot_line >= lines_per_region || line + 1 >= origin_lines) {
      ++st.hot_index;
      st.hot_line = 0;
    }
    ++checked;
    auto [resident, room] = slots.ResidentAndRoom(line);  // pins fill on their own
    if (resident) continue;
    if (!room && !DemoteColdLine(st)) {
      st.hot_index = st.hot.size();  // all the rest is hot or pinned: done until the next ranking
      break;
    }
    if (uint64_t moved = FillLine(line, st.buffer.data()); moved > 0) {
      used += moved;
      LiveStats::Bump(placement_promotions);
    }
  }
  return used;
}

uint64_t Engine::Impl::CleanInWindow(uint64_t budget) {
  if (!config.background_cleaner || stats.dirty_lines.load() == 0 || budget < line_size) return 0;
  Result<uint64_t> cleaned = CleanPass(std::min<uint64_t>(budget / line_size, cleaner_batch_lines.load()));
  return cleaned.ok() ? cleaned.value() * line_size : 0;  // a failure is retried next tick
}

bool Engine::Impl::DemoteColdLine(MoverState& st) {
  for (uint32_t n = 0; n < capacity; ++n) {
    const uint32_t slot = st.demote_cursor;
    st.demote_cursor = (st.demote_cursor + 1) % capacity;
    std::optional<uint64_t> line = slots.DemotionCandidate(slot);
    if (!line) continue;
    // A volume added since the start lies past the heat map: never hot.
    const uint32_t region = heat.RegionOf(*line * line_size);
    if (region < st.in_hot.size() && st.in_hot[region]) continue;
    // Dirty data goes to the origin first (the cleaner's own path).
    if (!CleanLines({*line}, nullptr).ok()) continue;
    std::lock_guard cell(StripeOf(*line));
    RecordBatch batch;
    if (!slots.EvictIfDemotable(slot, *line, batch)) continue;  // changed meanwhile
    LiveStats::Bump(placement_demotions);
    (void)Commit(batch, false);  // frees the slot once its record is deleted
    return true;
  }
  return false;
}

}  // namespace cachecore
