// Pinning and scheduled placement: the pieces (interval set, heat map,
// movement log, window syntax) and the engine's behaviour a user relies
// on: pinned ranges filled and never evicted, bounded and saved; placement
// moving the hottest data in and cold data out inside its window only.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "../cache-core/src/placement/heat_map.h"
#include "../cache-core/src/placement/line_intervals.h"
#include "../cache-core/src/placement/movement_log.h"
#include "support/block_io.h"
#include "support/engine_rig.h"
#include "support/fake_clock.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t K = 1024;

// ---- the pieces

TEST(LineIntervalsTest, MergesSplitsAndCounts) {
  LineIntervals s;
  s.Add(10, 20);
  s.Add(20, 30);  // touching: one interval
  s.Add(5, 12);   // overlapping
  EXPECT_EQ(s.intervals(), (std::vector<LineIntervals::Interval>{{5, 30}}));
  EXPECT_EQ(s.total(), 25u);
  auto removed = s.Remove(12, 15);
  EXPECT_EQ(removed, (std::vector<LineIntervals::Interval>{{12, 15}}));
  EXPECT_EQ(s.intervals(), (std::vector<LineIntervals::Interval>{{5, 12}, {15, 30}}));
  EXPECT_EQ(s.total(), 22u);
  EXPECT_TRUE(s.Contains(5));
  EXPECT_FALSE(s.Contains(12));
  EXPECT_FALSE(s.Contains(30));
  EXPECT_EQ(s.Overlap(0, 100), 22u);
  EXPECT_EQ(s.Overlap(10, 16), 3u);
  EXPECT_EQ(s.NextAtOrAfter(12), 15u);
  EXPECT_EQ(s.NextAtOrAfter(7), 7u);
  EXPECT_FALSE(s.NextAtOrAfter(30).has_value());
  EXPECT_TRUE(s.Remove(40, 50).empty());
}

TEST(LineIntervalsTest, EncodesAndRefusesDamagedText) {
  LineIntervals s;
  s.Add(1, 3);
  s.Add(100, 1000);
  Result<LineIntervals> back = LineIntervals::Decode(s.Encode());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->intervals(), s.intervals());
  EXPECT_TRUE(LineIntervals::Decode("").ok());
  for (const char* bad : {"1-", "5-3", "x", "1-2,", "1-2;3-4"}) {
    EXPECT_FALSE(LineIntervals::Decode(bad).ok()) << bad;
  }
}

TEST(HeatMapTest, CountsADayAndForgetsOlderHours) {
  HeatMap h(64 << 20, 4096, 16);  // 16 regions of 4 MiB
  EXPECT_EQ(h.region_bytes(), 4u << 20);
  EXPECT_EQ(h.regions(), 16u);
  h.AdvanceTo(1000);
  h.Record(0, 64 * K);           // 16 blocks in region 0
  h.Record(5 << 20, 4 * K);      // 1 block in region 1
  h.AdvanceTo(1001);
  h.Record(0, 4 * K);
  EXPECT_EQ(h.DayHeat(0), 17u);
  EXPECT_EQ(h.DayHeat(1), 1u);
  h.AdvanceTo(1024);  // hour 1000 is now more than a day old
  EXPECT_EQ(h.DayHeat(0), 1u);
  EXPECT_EQ(h.DayHeat(1), 0u);
  HeatMap copy(64 << 20, 4096, 16);
  ASSERT_TRUE(copy.Decode(h.Encode()));
  EXPECT_EQ(copy.DayHeat(0), 1u);
  HeatMap other(128 << 20, 4096, 16);  // another geometry: not taken
  EXPECT_FALSE(other.Decode(h.Encode()));
  h.AdvanceTo(5000);  // days later: all gone
  EXPECT_EQ(h.DayHeat(0), 0u);
}

// A past hour is kept in 16 bits: exact below 2048 blocks, within 1/4096
// above, whatever the count (a region read flat out all hour).
TEST(HeatMapTest, PastHoursKeepTheirCountsClosely) {
  for (uint64_t blocks : {2047ull, 2048ull, 4097ull, 123457ull, 1ull << 31}) {
    HeatMap one(64 << 20, 4096, 16);
    one.AdvanceTo(10);
    for (uint64_t left = blocks; left > 0;) {  // one region: 1024 blocks a call
      uint64_t n = std::min<uint64_t>(left, 1024);
      one.Record(0, n * 4096);
      left -= n;
    }
    one.AdvanceTo(11);
    const uint64_t day = one.DayHeat(0);
    if (blocks < 2048) {
      EXPECT_EQ(day, blocks);
    }
    const double error = std::abs(double(day) - double(blocks)) / double(blocks);
    EXPECT_LE(error, 1.0 / 4096) << blocks;
  }
}

// A map stored by an older cachectl (24 u32 counters a region) is taken
// back; so is one of finer regions over the same origin, folded.
TEST(HeatMapTest, TakesTheOlderFormatAndFinerRegions) {
  HeatMap fine(64 << 20, 4096, 16);  // 16 regions of 4 MiB
  fine.AdvanceTo(100);
  fine.Record(0, 8 * K);         // region 0
  fine.Record(5 << 20, 4 * K);   // region 1
  fine.AdvanceTo(101);
  fine.Record(9 << 20, 2 * K);   // region 2, this hour
  HeatMap coarse(64 << 20, 4096, 8);  // 8 regions of 8 MiB
  ASSERT_TRUE(coarse.Decode(fine.Encode()));
  EXPECT_EQ(coarse.DayHeat(0), 3u);
  EXPECT_EQ(coarse.DayHeat(1), 1u);
  EXPECT_FALSE(fine.Decode(coarse.Encode()));  // coarser into finer: no
  // Regions that are not a whole number of the old ones (the default went
  // from 16384 to 8192 regions: 932 lines a region became 1863).
  HeatMap odd(uint64_t{15258790} * 65536, 65536, 16384);
  HeatMap now(uint64_t{15258790} * 65536, 65536, 8192);
  ASSERT_EQ(odd.region_bytes(), 932u * 65536);
  ASSERT_EQ(now.region_bytes(), 1863u * 65536);
  odd.AdvanceTo(7);
  odd.Record(uint64_t{931} * 65536, 65536);   // old region 0 -> new region 0
  odd.Record(uint64_t{1864} * 65536, 65536);  // old region 2 starts at line 1864 -> new region 1
  ASSERT_TRUE(now.Decode(odd.Encode()));
  EXPECT_EQ(now.DayHeat(0), 16u);
  EXPECT_EQ(now.DayHeat(1), 16u);

  std::string v1("heatmap1", 8);  // 16 regions, hour 100: region 3 has 7 now, 5 an hour ago
  const uint32_t regions = 16;
  const uint64_t region_bytes = 4 << 20;
  const int64_t hour = 100;
  v1.append(reinterpret_cast<const char*>(&regions), 4);
  v1.append(reinterpret_cast<const char*>(&region_bytes), 8);
  v1.append(reinterpret_cast<const char*>(&hour), 8);
  std::vector<uint32_t> counts(16 * 24, 0);
  counts[3 * 24 + 100 % 24] = 7;
  counts[3 * 24 + 99 % 24] = 5;
  counts[3 * 24 + 77 % 24] = 1000;  // the oldest hour of the day
  v1.append(reinterpret_cast<const char*>(counts.data()), counts.size() * 4);
  HeatMap old(64 << 20, 4096, 16);
  ASSERT_TRUE(old.Decode(v1));
  EXPECT_EQ(old.DayHeat(3), 1012u);
  old.AdvanceTo(101);  // hour 77 goes
  old.Record(12 << 20, 4 * K);
  EXPECT_EQ(old.DayHeat(3), 13u);
  old.AdvanceTo(123);  // hour 100 is the oldest kept
  EXPECT_EQ(old.DayHeat(3), 8u);
  old.AdvanceTo(124);
  EXPECT_EQ(old.DayHeat(3), 1u);
}

// Found by reading: an hour that went back a day or more (a clock set
// right after running ahead) froze the map, every access piling into one
// hour until the clock caught up.
TEST(HeatMapTest, AClockThatWentBackADayStartsTheDayAfresh) {
  HeatMap h(64 << 20, 4096, 16);
  h.AdvanceTo(1000);
  h.Record(0, 4 * K);
  h.AdvanceTo(999);  // an hour back: ignored
  h.Record(0, 4 * K);
  EXPECT_EQ(h.DayHeat(0), 2u);
  h.AdvanceTo(900);  // four days back: afresh
  EXPECT_EQ(h.DayHeat(0), 0u);
  h.Record(0, 4 * K);
  h.AdvanceTo(901);
  h.Record(0, 4 * K);
  EXPECT_EQ(h.DayHeat(0), 2u);
  h.AdvanceTo(924);  // hour 900 is a day old now; 901 is the oldest kept
  EXPECT_EQ(h.DayHeat(0), 1u);
}

TEST(MovementLogTest, SplitsMovementByHour) {
  MovementLog log;
  const int64_t t0 = 1000 * 3600;
  log.Sample(t0 + 10, {});
  log.Sample(t0 + 20, {5, 1, 2, 8192, 3, 0, 4});
  log.Sample(t0 + 3600 + 5, {7, 1, 2, 8192, 3, 0, 4});
  std::vector<MovementHour> day = log.LastDay(t0 + 3600 + 5);
  ASSERT_EQ(day.size(), 24u);
  EXPECT_EQ(day.back().hour_start, t0 + 3600);
  EXPECT_EQ(day.back().promotions, 2u);
  EXPECT_EQ(day[22].hour_start, t0);
  EXPECT_EQ(day[22].promotions, 5u);
  EXPECT_EQ(day[22].cleaned_bytes, 8192u);
  EXPECT_EQ(day[22].pin_fills, 4u);
  // A reset counter (stats --reset) starts again from zero, never negative.
  log.Sample(t0 + 3600 + 6, {1, 1, 2, 8192, 3, 0, 4});
  EXPECT_EQ(log.LastDay(t0 + 3600 + 6).back().promotions, 3u);
  MovementLog copy;
  copy.Decode(log.Encode());
  EXPECT_EQ(copy.LastDay(t0 + 3600 + 6)[22].promotions, 5u);
  EXPECT_EQ(log.LastDay(t0 + 30 * 3600).back().promotions, 0u);  // a day later: nothing
}

TEST(PlacementWindowTest, ParsesAndChecksTimes) {
  Result<PlacementWindow> w = ParsePlacementWindow("01:30-05:00");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->Contains(90));
  EXPECT_FALSE(w->Contains(300));
  EXPECT_EQ(FormatPlacementWindow(*w), "01:30-05:00");
  Result<PlacementWindow> night = ParsePlacementWindow("22:00-02:00");
  ASSERT_TRUE(night.ok());
  EXPECT_TRUE(night->Contains(23 * 60));
  EXPECT_TRUE(night->Contains(60));
  EXPECT_FALSE(night->Contains(12 * 60));
  Result<PlacementWindow> all = ParsePlacementWindow("00:00-24:00");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->Contains(0) && all->Contains(1439));
  for (const char* bad : {"", "1:00-2:00", "25:00-01:00", "01:60-02:00", "03:00-03:00", "01:00-24:30",
                          "01:00 02:00", "01:00-02:00x"}) {
    EXPECT_FALSE(ParsePlacementWindow(bad).ok()) << bad;
  }
}

// ---- the engine

EngineConfig Config(CacheMode mode = CacheMode::kWriteThrough) {
  EngineConfig c;
  c.mode = mode;
  c.line_size = 4096;
  c.sequential_cutoff = 0;
  c.background_cleaner = false;
  return c;
}

// The engine tests run on a FakeClock (noon, unless a test moves it): the
// window decision and the hours of the movement report never depend on the
// machine's time.
RigOptions WithClock(Clock* clock) {
  RigOptions o;
  o.clock = clock;
  return o;
}

// Polls `done` until it holds, for up to 20 s: the mover works in ticks of
// real time (about 200 ms) on its own thread.
bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// Waits until the mover has run `ticks` whole ticks from now. It reads the
// clock once a tick, at its start, so the tick that reads it the first time
// from now may have begun before: one read more. The caller must not read
// the clock meanwhile (Engine::movement() does).
bool MoverRan(const FakeClock& clock, uint64_t ticks) {
  const uint64_t reads = clock.reads();
  return WaitFor([&] { return clock.reads() >= reads + ticks + 1; });
}

bool PinsResident(Engine& e) {
  PinReport r = e.pins();
  return r.resident_bytes == r.pinned_bytes;
}

// Reads the whole 8 MiB volume twice: eight times the cache, every line
// a candidate for eviction.
void Churn(Engine& e) {
  AlignedBuffer b(256 * K);
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t at = 0; at < (8 << 20); at += 256 * K) ASSERT_TRUE(e.Read(at, b.data(), 256 * K).ok());
  }
}

// Writes the pattern of `tag` straight onto the origin (under the cache).
void SeedOrigin(EngineRig& rig, uint64_t offset, uint64_t length, uint32_t tag) {
  AlignedBuffer b(length);
  FillPattern(b.data(), offset, length, tag);
  ASSERT_TRUE(rig.raw_origin().Write(offset, b.data(), length).ok());
}

TEST(PinTest, PinnedRangeIsFilledAndNeverEvicted) {
  FakeClock clock;
  EngineRig rig(WithClock(&clock));  // 8 MiB origin, 1 MiB of 4 KiB lines
  ASSERT_TRUE(rig.Create(Config()).ok());
  SeedOrigin(rig, 1 << 20, 256 * K, 7);
  ASSERT_TRUE(rig.engine().Pin(1 << 20, 256 * K).ok());
  ASSERT_TRUE(WaitFor([&] { return PinsResident(rig.engine()); }));
  PinReport r = rig.engine().pins();
  ASSERT_EQ(r.ranges.size(), 1u);
  EXPECT_EQ(r.ranges[0].offset, 1u << 20);
  EXPECT_EQ(r.pinned_bytes, 256 * K);
  EXPECT_EQ(r.limit_bytes, 512 * K);  // half of the cache
  Churn(rig.engine());
  EXPECT_TRUE(PinsResident(rig.engine()));
  StatsSnapshot before = rig.engine().stats();
  EXPECT_TRUE(HasPattern(rig.engine(), 1 << 20, 256 * K, 7));
  EXPECT_EQ(rig.engine().stats().read_hits - before.read_hits, 64u);  // every block a hit
  EXPECT_GE(rig.engine().movement().hours.back().pin_fills, 64u);
}

TEST(PinTest, RoundsOutToLinesAndRefusesBadRanges) {
  FakeClock clock;
  EngineRig rig(WithClock(&clock));
  EngineConfig c = Config();
  c.line_size = 64 * K;
  ASSERT_TRUE(rig.Create(c).ok());
  ASSERT_TRUE(rig.engine().Pin(100 * K, 10 * K).ok());  // inside line 1
  PinReport r = rig.engine().pins();
  ASSERT_EQ(r.ranges.size(), 1u);
  EXPECT_EQ(r.ranges[0].offset, 64 * K);
  EXPECT_EQ(r.ranges[0].length, 64 * K);
  EXPECT_EQ(rig.engine().Pin(0, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rig.engine().Pin(8 << 20, 4 * K).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(rig.engine().Pin((8 << 20) - 4 * K, 8 * K).code(), StatusCode::kOutOfRange);
  // 8 lines of 16 may be pinned: one is, eight more would pass the limit.
  Status over = rig.engine().Pin(1 << 20, 512 * K);
  EXPECT_EQ(over.code(), StatusCode::kBusy);
  EXPECT_NE(over.message().find("limit"), std::string::npos) << over.message();
  EXPECT_EQ(rig.engine().pins().pinned_bytes, 64 * K);  // unchanged
  EXPECT_TRUE(rig.engine().Pin(1 << 20, 448 * K).ok());  // seven more: exactly the limit
}

TEST(PinTest, UnpinReturnsLinesToThePolicy) {
  FakeClock clock;
  EngineRig rig(WithClock(&clock));
  ASSERT_TRUE(rig.Create(Config()).ok());
  ASSERT_TRUE(rig.engine().Pin(0, 256 * K).ok());
  ASSERT_TRUE(WaitFor([&] { return PinsResident(rig.engine()); }));
  EXPECT_EQ(rig.engine().Unpin(4 << 20, 4 * K).code(), StatusCode::kNotFound);
  ASSERT_TRUE(rig.engine().Unpin(64 * K, 64 * K).ok());  // a hole in the middle
  PinReport r = rig.engine().pins();
  ASSERT_EQ(r.ranges.size(), 2u);
  EXPECT_EQ(r.pinned_bytes, 192 * K);
  ASSERT_TRUE(rig.engine().Unpin(0, 256 * K).ok());
  EXPECT_EQ(rig.engine().pins().pinned_bytes, 0u);
  Churn(rig.engine());  // nothing protects the old range now
  AlignedBuffer b(4 * K);
  StatsSnapshot before = rig.engine().stats();
  for (uint64_t at = 0; at < 256 * K; at += 4 * K) ASSERT_TRUE(rig.engine().Read(at, b.data(), 4 * K).ok());
  EXPECT_GT(rig.engine().stats().read_misses - before.read_misses, 0u);
}

TEST(PinTest, PinsAndSettingsSurviveRestart) {
  FakeClock clock;
  EngineRig rig(WithClock(&clock));
  ASSERT_TRUE(rig.Create(Config()).ok());
  ASSERT_TRUE(rig.engine().Pin(2 << 20, 128 * K).ok());
  PlacementSettings p;
  p.window = ParsePlacementWindow("01:00-03:30").value();
  p.rate_bytes_per_s = 10 << 20;
  ASSERT_TRUE(rig.engine().SetPlacement(p).ok());
  ASSERT_TRUE(WaitFor([&] { return PinsResident(rig.engine()); }));
  ASSERT_TRUE(rig.Restart(Config()).ok());
  PinReport r = rig.engine().pins();
  ASSERT_EQ(r.ranges.size(), 1u);
  EXPECT_EQ(r.ranges[0].offset, 2u << 20);
  EXPECT_EQ(r.resident_bytes, 128 * K);  // warm: still there
  PlacementSettings back = rig.engine().placement();
  ASSERT_TRUE(back.window.has_value());
  EXPECT_EQ(FormatPlacementWindow(*back.window), "01:00-03:30");
  EXPECT_EQ(back.rate_bytes_per_s, 10u << 20);
  Churn(rig.engine());
  EXPECT_TRUE(PinsResident(rig.engine()));  // still pinned after the restart
  EXPECT_EQ(rig.engine().SetPlacement({std::nullopt, 0}).code(), StatusCode::kInvalidArgument);
}

TEST(PinTest, DirtyDataInAPinnedRangeStaysCorrect) {
  FakeClock clock;
  EngineRig rig(WithClock(&clock));
  ASSERT_TRUE(rig.Create(Config(CacheMode::kWriteBack)).ok());
  ASSERT_TRUE(rig.engine().Pin(0, 128 * K).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 16 * K, 32 * K, 3).ok());
  ASSERT_TRUE(WaitFor([&] { return PinsResident(rig.engine()); }));
  Churn(rig.engine());
  EXPECT_TRUE(HasPattern(rig.engine(), 16 * K, 32 * K, 3));
  ASSERT_TRUE(rig.engine().Flush().ok());
  AlignedBuffer b(32 * K), want(32 * K);
  ASSERT_TRUE(rig.raw_origin().Read(16 * K, b.data(), 32 * K).ok());
  FillPattern(want.data(), 16 * K, 32 * K, 3);
  EXPECT_EQ(std::memcmp(b.data(), want.data(), 32 * K), 0);
}

// A cache full of cold lines (filled by pins, then unpinned) and a hot
// range that the admission filter keeps out: only placement brings it in.
class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineConfig c = Config();
    c.admit_after_misses = 250;  // reads alone never allocate here
    ASSERT_TRUE(rig_.Create(c).ok());
    Engine& e = rig_.engine();
    PlacementSettings fast;
    fast.rate_bytes_per_s = 1ull << 30;
    ASSERT_TRUE(e.SetPlacement(fast).ok());  // off, but fast fills
    for (uint64_t at : {4ull << 20, 4ull << 20 | 512 * K}) {
      ASSERT_TRUE(e.Pin(at, 512 * K).ok());
      ASSERT_TRUE(WaitFor([&] { return PinsResident(e); }));
      ASSERT_TRUE(e.Unpin(at, 512 * K).ok());
    }
    ASSERT_EQ(e.stats().occupancy_lines, 256u);
    SeedOrigin(rig_, 0, 256 * K, 9);
    AlignedBuffer b(256 * K);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(e.Read(0, b.data(), 256 * K).ok());
  }

  uint64_t HotResident() {
    StatsSnapshot before = rig_.engine().stats();
    EXPECT_TRUE(HasPattern(rig_.engine(), 0, 256 * K, 9));
    return rig_.engine().stats().read_hits - before.read_hits;
  }

  FakeClock clock_;  // before the rig: outlives the engine
  EngineRig rig_{WithClock(&clock_)};
};

TEST_F(PlacementTest, OutsideTheWindowNothingMoves) {
  Engine& e = rig_.engine();
  ASSERT_TRUE(MoverRan(clock_, 3));  // placement off: ticks enough to move it all, were it on
  EXPECT_EQ(HotResident(), 0u);
  MovementHour h = e.movement().hours.back();
  EXPECT_EQ(h.placement_promotions, 0u);
  EXPECT_EQ(h.placement_demotions, 0u);
  PlacementSettings night;
  night.window = ParsePlacementWindow("01:00-05:00").value();  // the clock says noon
  night.rate_bytes_per_s = 1ull << 30;
  ASSERT_TRUE(e.SetPlacement(night).ok());
  ASSERT_TRUE(MoverRan(clock_, 3));
  EXPECT_EQ(HotResident(), 0u);
  h = e.movement().hours.back();
  EXPECT_EQ(h.placement_promotions, 0u);
  EXPECT_EQ(h.placement_demotions, 0u);
  clock_.Advance(14 * 3600);  // 02:00 the next day: inside the window, the heat a day old at most
  ASSERT_TRUE(WaitFor([&] { return e.movement().hours.back().placement_promotions >= 64; }));
  EXPECT_EQ(HotResident(), 64u);
}

TEST_F(PlacementTest, InsideTheWindowHotDataComesInAndColdGoesOut) {
  Engine& e = rig_.engine();
  PlacementSettings on;
  on.window = ParsePlacementWindow("00:00-24:00").value();
  on.rate_bytes_per_s = 1ull << 30;
  ASSERT_TRUE(e.SetPlacement(on).ok());
  ASSERT_TRUE(WaitFor([&] { return e.movement().hours.back().placement_promotions >= 64; }));
  MovementReport m = e.movement();
  EXPECT_EQ(HotResident(), 64u);
  EXPECT_EQ(m.hours.back().placement_promotions, 64u);
  EXPECT_EQ(m.hours.back().placement_demotions, 64u);  // cold lines made room
  EXPECT_EQ(m.hours.back().pin_fills, 256u);
  ASSERT_FALSE(m.hottest.empty());
  EXPECT_LT(m.hottest[0].offset, 256 * K);  // the hottest region is the hot range
  EXPECT_EQ(m.hottest[0].accesses, 20u * (m.region_bytes / (4 * K)));
  EXPECT_EQ(m.hottest[0].resident_bytes, m.hottest[0].length);
  EXPECT_EQ(e.stats().occupancy_lines, 256u);
}

TEST_F(PlacementTest, TheRateBoundsMovement) {
  Engine& e = rig_.engine();
  PlacementSettings slow;
  slow.window = ParsePlacementWindow("00:00-24:00").value();
  slow.rate_bytes_per_s = 40 * K;  // ten lines a second
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(e.SetPlacement(slow).ok());
  // Twice the first second's burst: the second ten lines came at the rate.
  ASSERT_TRUE(WaitFor([&] { return e.movement().hours.back().placement_promotions >= 20; }));
  uint64_t moved = e.movement().hours.back().placement_promotions;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Ten lines a second since the window opened, plus one second's burst.
  EXPECT_LE(moved, static_cast<uint64_t>(10 * seconds) + 10) << "in " << seconds << " s";
  EXPECT_LT(moved, 64u);  // far from all of it
}

// A stream past the sequential cutoff is kept out by admission; placement
// must not bring it in either (a nightly backup would warm every region).
TEST(PlacementHeatTest, StreamsPastTheCutoffAreNotHeat) {
  FakeClock clock;
  EngineRig rig(WithClock(&clock));
  EngineConfig c = Config();
  c.sequential_cutoff = 64 * K;
  c.admit_after_misses = 250;  // only placement allocates here
  ASSERT_TRUE(rig.Create(c).ok());
  AlignedBuffer b(16 * K);
  for (int pass = 0; pass < 3; ++pass) {
    for (uint64_t at = 2 << 20; at < 3 << 20; at += 16 * K) ASSERT_TRUE(rig.engine().Read(at, b.data(), 16 * K).ok());
  }
  PlacementSettings on;
  on.window = ParsePlacementWindow("00:00-24:00").value();
  on.rate_bytes_per_s = 1ull << 30;
  ASSERT_TRUE(rig.engine().SetPlacement(on).ok());
  ASSERT_TRUE(WaitFor([&] { return rig.engine().movement().hours.back().placement_promotions >= 4; }));
  ASSERT_TRUE(MoverRan(clock, 3));  // time for more, were there more (one tick moves it all)
  uint64_t placed = rig.engine().movement().hours.back().placement_promotions;
  EXPECT_LE(placed, 16u) << "only the stream's head, before the cutoff, is heat";
  EXPECT_EQ(rig.engine().stats().occupancy_lines, placed);
}

TEST(PlacementCleaningTest, InsideTheWindowDirtyDataGoesToTheOrigin) {
  FakeClock clock;
  EngineRig rig(WithClock(&clock));
  EngineConfig c = Config(CacheMode::kWriteBack);
  c.background_cleaner = true;  // its target (40 %) is never reached here
  c.dirty_target_pct = 40;
  ASSERT_TRUE(rig.Create(c).ok());
  ASSERT_TRUE(WritePattern(rig.engine(), 0, 256 * K, 5).ok());  // a quarter of the lines
  ASSERT_TRUE(MoverRan(clock, 3));  // the cleaner's own loop runs every 100 ms meanwhile
  EXPECT_EQ(rig.engine().stats().dirty_lines, 64u);  // no window: the cleaner waits for its target
  PlacementSettings on;
  on.window = ParsePlacementWindow("01:00-05:00").value();  // the clock says noon
  ASSERT_TRUE(rig.engine().SetPlacement(on).ok());
  ASSERT_TRUE(MoverRan(clock, 3));
  EXPECT_EQ(rig.engine().stats().dirty_lines, 64u);  // outside the window: still waiting
  clock.Advance(14 * 3600);  // 02:00 the next day: inside
  ASSERT_TRUE(WaitFor([&] { return rig.engine().stats().dirty_lines == 0; }));
  EXPECT_GE(rig.engine().movement().hours.back().cleaned_bytes, 256 * K);
  AlignedBuffer b(256 * K), want(256 * K);
  ASSERT_TRUE(rig.raw_origin().Read(0, b.data(), 256 * K).ok());
  FillPattern(want.data(), 0, 256 * K, 5);
  EXPECT_EQ(std::memcmp(b.data(), want.data(), 256 * K), 0);
}

}  // namespace
}  // namespace cachecore::testing
