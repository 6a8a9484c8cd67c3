// The human views of stats: the figures and percentages a person reads,
// from the fields a daemon sends, and the rates of an interval.
#include "stats_view.h"

#include <gtest/gtest.h>

namespace cachectl {
namespace {

// A running write-back cache of 16 lines of 64 KiB: 8 occupied, 2 dirty;
// 10 read requests (24 blocks: 18 hits), 6 writes (8 blocks: 2 hits).
Fields Running() {
  return {{"name", "vol"},
          {"state", "running"},
          {"mode", "write-back"},
          {"policy", "adaptive: small 10 %, T2, ghost 1x (0 switches)"},
          {"frontend", "NBD socket only"},
          {"kernel_device", ""},
          {"dm_device", ""},
          {"line_size", "65536"},
          {"origin_bytes", "1073741824"},
          {"cache_device_bytes", "2097152"},
          {"started_from", "attach"},
          {"seq_cutoff", "4194304"},
          {"dirty_target_pct", "10"},
          {"dirty_high_pct", "80"},
          {"dirty_low_pct", "40"},
          {"cleaner_batch_lines", "64"},
          {"nbd_max_connections", "32"},
          {"capacity_lines", "16"},
          {"overprovisioned_bytes", "0"},
          {"placement_window", "off"},
          {"placement_rate", "67108864"},
          {"pinned_bytes", "131072"},
          {"pin_limit_bytes", "524288"},
          {"occupancy_lines", "8"},
          {"dirty_lines", "2"},
          {"clean_lines", "6"},
          {"read_hits", "18"},
          {"read_misses", "6"},
          {"write_hits", "2"},
          {"write_misses", "6"},
          {"read_requests", "10"},
          {"write_requests", "6"},
          {"read_bytes", "98304"},
          {"write_bytes", "32768"},
          {"promotions", "8"},
          {"bypassed", "0"},
          {"evictions", "0"},
          {"cleaner_writes", "1"},
          {"cleaned_bytes", "65536"},
          {"cleaner_state", "idle"},
          {"writeback_rate", "0"},
          {"errors.cache.read", "0"},
          {"errors.origin.write", "0"},
          {"origin", "/tmp/origin.img"},
          {"cache", "/tmp/cache.img"},
          {"nbd_socket", "/run/cachectl/vol/nbd.sock"}};
}

void Set(Fields& f, const std::string& key, const std::string& value) {
  for (auto& [k, v] : f) {
    if (k == key) v = value;
  }
}

bool HasLine(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(StatsViewTest, UsageInUnitsAndShares) {
  const std::string view = HumanStats(Running());
  EXPECT_TRUE(HasLine(view, "vol: running, write-back, adaptive: small 10 %, T2, ghost 1x (0 switches)")) << view;
  EXPECT_TRUE(HasLine(view, "  device               nbd+unix:///?socket=/run/cachectl/vol/nbd.sock")) << view;
  EXPECT_TRUE(HasLine(view, "  origin               /tmp/origin.img, 1.0 GiB")) << view;
  EXPECT_TRUE(HasLine(view, "  cache device         /tmp/cache.img, 2.0 MiB, lines of 64.0 KiB")) << view;
  EXPECT_TRUE(HasLine(view, "  capacity                  1.0 MiB   100.0 %")) << view;
  EXPECT_TRUE(HasLine(view, "  occupied                512.0 KiB    50.0 %")) << view;
  EXPECT_TRUE(HasLine(view, "  clean                   384.0 KiB    37.5 %")) << view;
  EXPECT_TRUE(HasLine(view, "  dirty                   128.0 KiB    12.5 %")) << view;
  EXPECT_TRUE(HasLine(view, "  free                    512.0 KiB    50.0 %")) << view;
  EXPECT_TRUE(HasLine(view, "  pinned                  128.0 KiB    12.5 %")) << view;
}

TEST(StatsViewTest, RequestsAndHitRatiosAsPercentages) {
  const std::string view = HumanStats(Running());
  EXPECT_TRUE(HasLine(view, "  reads                          10 requests    62.5 % of requests")) << view;
  EXPECT_TRUE(HasLine(view, "  writes                          6 requests    37.5 % of requests")) << view;
  EXPECT_TRUE(HasLine(view, "  read hits                      18 blocks      56.2 % of 4 KiB blocks")) << view;
  EXPECT_TRUE(HasLine(view, "  write misses                    6 blocks      18.8 % of 4 KiB blocks")) << view;
  EXPECT_TRUE(HasLine(view, "  read hit ratio       75.0 %")) << view;
  EXPECT_TRUE(HasLine(view, "  hit ratio            62.5 %")) << view;
  EXPECT_TRUE(HasLine(view, "  promotions           8 lines, 512.0 KiB")) << view;
  EXPECT_TRUE(HasLine(view, "  cleaner writes       1, 64.0 KiB cleaned")) << view;
}

TEST(StatsViewTest, ErrorsOnlyWhenThereAreAny) {
  EXPECT_TRUE(HasLine(HumanStats(Running()), "errors: none"));
  Fields f = Running();
  Set(f, "errors.origin.write", "3");
  const std::string view = HumanStats(f);
  EXPECT_TRUE(HasLine(view, "  origin write         3")) << view;
  EXPECT_EQ(view.find("cache read"), std::string::npos) << view;
}

TEST(StatsViewTest, SettingsInHumanUnits) {
  Fields f = Running();
  std::string view = HumanStats(f);
  EXPECT_TRUE(HasLine(view, "  sequential cutoff    4.0 MiB of a stream")) << view;
  EXPECT_TRUE(HasLine(view, "  dirty watermarks     target 10 %, low 40 %, high 80 %")) << view;
  EXPECT_TRUE(HasLine(view, "  placement            off")) << view;
  EXPECT_TRUE(HasLine(view, "  NBD clients          at most 32 at once")) << view;
  Set(f, "placement_window", "22:00-04:00");
  Set(f, "seq_cutoff", "0");
  view = HumanStats(f);
  EXPECT_TRUE(HasLine(view, "  placement            22:00-04:00 at 64.0 MiB/s")) << view;
  EXPECT_TRUE(HasLine(view, "  sequential cutoff    off")) << view;
}

TEST(StatsViewTest, AStoppedCacheShowsWhereItsDevicesAre) {
  const std::string view =
      HumanStats({{"name", "vol"}, {"state", "stopped"}, {"origin", "/dev/sdb"}, {"cache", "/dev/nvme0n1"}});
  EXPECT_EQ(view, "vol: stopped\n  origin               /dev/sdb\n  cache device         /dev/nvme0n1\n");
}

TEST(StatsViewTest, RatesOfAnInterval) {
  Fields before = Running(), after = Running();
  Set(after, "read_requests", "410");   // 400 reads
  Set(after, "read_bytes", "3298304");  // 3.2 MB more
  Set(after, "write_requests", "106");  // 100 writes
  Set(after, "write_bytes", "1632768");
  Set(after, "read_hits", "318");       // 300 of 400 read blocks hit
  Set(after, "read_misses", "106");
  Set(after, "write_hits", "2");        // 100 write blocks missed
  Set(after, "write_misses", "106");
  Set(after, "promotions", "208");
  Set(after, "dirty_lines", "6");       // 4 lines more
  Set(after, "cleaned_bytes", "2065536");
  const IntervalRates r = RatesBetween(before, after, 2.0);
  EXPECT_DOUBLE_EQ(r.read_iops, 200);
  EXPECT_DOUBLE_EQ(r.write_iops, 50);
  EXPECT_DOUBLE_EQ(r.read_mb_per_s, 1.6);
  EXPECT_DOUBLE_EQ(r.write_mb_per_s, 0.8);
  ASSERT_TRUE(r.read_hit_pct && r.hit_pct);
  EXPECT_DOUBLE_EQ(*r.read_hit_pct, 75.0);
  EXPECT_DOUBLE_EQ(*r.hit_pct, 60.0);
  EXPECT_DOUBLE_EQ(r.promotions_per_s, 100);
  EXPECT_EQ(r.dirty_bytes, 6u * 65536);
  EXPECT_DOUBLE_EQ(r.dirty_mb_per_s, 4 * 65536 / 2.0 / 1e6);
  EXPECT_DOUBLE_EQ(r.cleaner_mb_per_s, 1.0);
  const std::string row = WatchRow("12:00:00", r);
  EXPECT_NE(row.find("   200      1.6        50      0.8  75.0 %  60.0 %"), std::string::npos) << row;
}

TEST(StatsViewTest, AnIntervalWithoutAccessesHasNoHitRatio) {
  const IntervalRates r = RatesBetween(Running(), Running(), 1.0);
  EXPECT_FALSE(r.read_hit_pct);
  EXPECT_EQ(r.read_iops, 0);
  EXPECT_NE(WatchRow("12:00:00", r).find("      -       -"), std::string::npos);
}

// A reset between two samples: the interval's counts are the new ones.
TEST(StatsViewTest, AResetInTheIntervalCountsFromZero) {
  Fields after = Running();
  Set(after, "read_requests", "4");
  EXPECT_DOUBLE_EQ(RatesBetween(Running(), after, 1.0).read_iops, 4);
}

// stats --watch --reset: the daemon zeroes the counters at each sample,
// so each sample is one interval's count already.
TEST(StatsViewTest, ResetAtEachSampleTakesTheSampleAsTheInterval) {
  Fields before = Running(), after = Running();
  Set(before, "read_requests", "300");
  Set(after, "read_requests", "300");  // as many again in this interval
  EXPECT_DOUBLE_EQ(RatesBetween(before, after, 1.0, true).read_iops, 300);
  EXPECT_DOUBLE_EQ(RatesBetween(before, after, 1.0).read_iops, 0);
}

// A cache that was stopped, or whose daemon refused, at the first sample
// has no interval: its lifetime's counters are no rate.
TEST(StatsViewTest, NoRatesAcrossAStart) {
  const Fields stopped{{"name", "vol"}, {"state", "stopped"}};
  EXPECT_EQ(RatesBetween(stopped, Running(), 1.0).read_iops, 0);
  const Fields refused{{"name", "vol"}, {"state", "refused"}};
  EXPECT_FALSE(FieldView(refused).running());
  EXPECT_EQ(CapacityText(FieldView(refused)), "-");
  EXPECT_EQ(TopRow(refused, {}), "vol              refused \n");
}

// A long device path is printed whole, its line ended.
TEST(StatsViewTest, LongPathsAreNotCut) {
  Fields f = Running();
  const std::string path = "/dev/disk/by-path/" + std::string(400, 'p');
  Set(f, "origin", path);
  EXPECT_TRUE(HasLine(HumanStats(f), "  origin               " + path + ", 1.0 GiB"));
}

TEST(StatsViewTest, TopAndListColumns) {
  const std::string row = TopRow(Running(), RatesBetween(Running(), Running(), 1.0));
  EXPECT_EQ(row.rfind("vol              running  write-back       1.0 MiB  50.0 %  12.5 %", 0), 0u) << row;
  Fields f = Running();
  Set(f, "errors.cache.read", "2");
  Set(f, "errors.origin.write", "1");
  EXPECT_EQ(FieldView(f).Errors(), 3u);
  const FieldView stopped({{"name", "old"}, {"state", "stopped"}});
  EXPECT_EQ(CapacityText(stopped), "-");
  EXPECT_EQ(OccupancyText(FieldView(Running())), "50.0 %");
}

}  // namespace
}  // namespace cachectl
