// Cache sizing (cachectl advise): the curve agrees with full replays of the
// engine, the recommendation follows from it, and the trace formats users
// record (blkparse, MSR Cambridge) read as they should or fail clearly.
#include <gtest/gtest.h>

#include <fstream>

#include "cachecore/planning/advise.h"
#include "cachecore/planning/replay.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

std::string Trace(const std::string& name) { return std::string(CACHECTL_TRACES_DIR) + "/" + name; }

// `policy`: the engine's default (the adaptive one) unless given.
double ReplayHitRatio(const std::string& trace, uint32_t pct, PolicyKind policy = ReplayOptions{}.policy) {
  ReplayOptions o;
  o.trace_path = trace;
  o.policy = policy;
  o.cache_size = ParseCacheSize(std::to_string(pct) + "%").value();
  Result<ReplayResult> r = ReplayTrace(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->stats.hit_ratio() : -1;
}

// The curve against full replays through the engine at three sizes, within
// one percentage point, on a shared trace with reads and writes.
TEST(AdviseTest, CurveMatchesReplayAtThreeSizes) {
  AdviseOptions o;
  ASSERT_EQ(o.policy, ReplayOptions{}.policy) << "advise and replay run the same default";
  o.trace_path = Trace("cloudphysics_io_vscsi.csv.zst");
  Result<AdviseResult> r = AdviseCacheSize(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->curve.size(), 100u);
  EXPECT_EQ(r->footprint_blocks, 269210u);  // as traces/README.md says
  for (uint32_t pct : {1u, 10u, 50u}) {
    EXPECT_NEAR(r->curve[pct - 1].hit_ratio, ReplayHitRatio(o.trace_path, pct), 0.01) << pct << " %";
  }
  for (size_t i = 0; i < r->curve.size(); ++i) {
    EXPECT_EQ(r->curve[i].size_pct, i + 1);
    EXPECT_EQ(r->curve[i].cache_bytes, r->footprint_blocks * (i + 1) / 100 * 4096);
  }
}

// The two-level curve (a RAM tier above the cache): the share of reads the
// tier serves agrees with a replay through the engine with that tier, on a
// trace of reads and writes (writes make the tier forget); the tier adds to
// the cache's hits, never takes from them; and without it nothing is from RAM.
TEST(AdviseTest, TwoLevelCurveMatchesReplayWithARamTier) {
  AdviseOptions o;
  o.trace_path = Trace("tencent_cbs_sample.csv.zst");
  Result<AdviseResult> one = AdviseCacheSize(o);
  o.ram_cache_bytes = 16 << 20;
  Result<AdviseResult> two = AdviseCacheSize(o);
  ASSERT_TRUE(one.ok() && two.ok());
  for (size_t i = 0; i < 100; ++i) {
    EXPECT_EQ(one->curve[i].ram_hit_ratio, 0.0);
    EXPECT_GE(two->curve[i].read_hit_ratio + 1e-9, one->curve[i].read_hit_ratio) << i + 1 << " %";
    EXPECT_LE(two->curve[i].ram_hit_ratio, two->curve[i].read_hit_ratio + 1e-9) << i + 1 << " %";
  }
  ReplayOptions r;
  r.trace_path = o.trace_path;
  r.cache_size = ParseCacheSize("5%").value();
  r.ram_cache_bytes = o.ram_cache_bytes;
  Result<ReplayResult> replay = ReplayTrace(r);
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  EXPECT_GT(replay->stats.ram_hits, 0u);
  EXPECT_NEAR(two->curve[4].ram_hit_ratio, replay->stats.ram_hit_ratio(), 0.01);
  EXPECT_NEAR(two->curve[4].read_hit_ratio, replay->stats.read_hit_ratio(), 0.01);
}

// Advise simulates the policy it is asked for, as replay runs it: every
// candidate's curve against its replay through the engine, within a point.
TEST(AdviseTest, EveryPolicysCurveMatchesItsReplay) {
  for (PolicyKind k : {PolicyKind::kS3Fifo, PolicyKind::kLru, PolicyKind::kArc, PolicyKind::kWTinyLfu}) {
    AdviseOptions o;
    o.trace_path = Trace("tencent_cbs_sample.csv.zst");
    o.policy = k;
    Result<AdviseResult> r = AdviseCacheSize(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_NEAR(r->curve[4].hit_ratio, ReplayHitRatio(o.trace_path, 5, k), 0.01) << PolicyName(k);
  }
}

// A sample of a quarter of the blocks still lands within a point or two.
TEST(AdviseTest, SampledCurveStaysClose) {
  AdviseOptions full, sampled;
  full.trace_path = sampled.trace_path = Trace("arc_P2.csv.zst");
  sampled.max_sampled_blocks = 30000;  // of 120,308
  Result<AdviseResult> a = AdviseCacheSize(full), b = AdviseCacheSize(sampled);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LT(b->sampling_rate, 0.3);
  EXPECT_NEAR(static_cast<double>(b->footprint_blocks), 120308.0, 120308.0 * 0.05);
  for (uint32_t pct : {5u, 10u, 25u, 50u}) {
    EXPECT_NEAR(b->curve[pct - 1].hit_ratio, a->curve[pct - 1].hit_ratio, 0.02) << pct << " %";
  }
}

class AdviseFile : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  Result<AdviseResult> Advise(const std::string& path, TraceFormat format) {
    AdviseOptions o;
    o.trace_path = path;
    o.format = format;
    return AdviseCacheSize(o);
  }
  TempDir dir_;
};

// Four reads of two blocks, one write: the curve, the read-hit ratio and
// the recommendation follow by hand.
TEST_F(AdviseFile, SmallTraceByHand) {
  std::string p = Write("t.csv", "0,R,0,4096\n1,R,4096,4096\n2,R,0,4096\n3,R,4096,4096\n4,W,0,4096\n");
  Result<AdviseResult> r = Advise(p, TraceFormat::kCsv);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->footprint_blocks, 2u);
  EXPECT_EQ(r->accesses, 5u);
  EXPECT_DOUBLE_EQ(r->curve[99].hit_ratio, 3.0 / 5);       // two cold misses
  EXPECT_DOUBLE_EQ(r->curve[99].read_hit_ratio, 2.0 / 4);
  EXPECT_EQ(r->recommended_size_pct, 100u);  // half the footprint holds one block: no hits
}

TEST_F(AdviseFile, ReadsBlkparseOutputAtQueueEvents) {
  std::string p = Write("b.txt",
      "  8,0    3        1     0.000000000   697  Q   W 8 + 8 [kworker]\n"
      "  8,0    3        2     0.000001000   697  G   W 8 + 8 [kworker]\n"
      "  8,0    3        3     0.000002000   697  D   W 8 + 8 [kworker]\n"
      "  8,0    1        4     0.000100000   697  C   W 8 + 8 [0]\n"
      "  8,0    0        5     0.001500000   700  Q  RA 8 + 16 [cat]\n"
      "  8,0    0        6     0.001600000   700  Q FWS 0 + 0 [sync]\n"
      "  8,0    0        7     0.001700000   700  Q   D 64 + 8 [fstrim]\n"
      "  8,0    0        0     0.001800000     0  m   N cfq700 insert_request\n"
      "\n"
      "CPU0 (8,0):\n Reads Queued:           1,        8KiB\n"
      "Total (8,0):\n Writes Queued:          1,        4KiB\n");
  auto reader = TraceReader::Open(p, TraceFormat::kBlkparse);
  ASSERT_TRUE(reader.ok());
  TraceRecord r;
  ASSERT_TRUE(reader.value()->Next(&r).value());
  EXPECT_TRUE(r.is_write);
  EXPECT_EQ(r.offset, 4096u);
  EXPECT_EQ(r.length, 4096u);
  ASSERT_TRUE(reader.value()->Next(&r).value());
  EXPECT_FALSE(r.is_write);
  EXPECT_EQ(r.offset, 4096u);
  EXPECT_EQ(r.length, 8192u);
  EXPECT_EQ(r.timestamp_us, 1500u);
  Result<bool> next = reader.value()->Next(&r);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_FALSE(next.value());  // flush, discard, message and summary are not requests
}

TEST_F(AdviseFile, ReadsMsrCambridgeCsv) {
  std::string p = Write("m.csv",
      "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n"
      "128166372003061629,usr,0,Read,7014609920,24576,41286\n"
      "128166372016382155,usr,0,Write,1317441536,8192,1963\n");
  Result<AdviseResult> a = Advise(p, TraceFormat::kMsr);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->requests, 2u);
  EXPECT_EQ(a->accesses, 9u);  // the first starts mid-block: 7 blocks, then 2
}

TEST_F(AdviseFile, BadTracesAreRefusedWithFileAndLine) {
  struct Case {
    TraceFormat format;
    std::string text, message;
  } cases[] = {
      {TraceFormat::kCsv, "0,R,0,4096\nnot a trace\n", "x:2:"},
      {TraceFormat::kBlkparse, "  8,0 3 1 0.0 697 Q W 8 + 8\nhello world\n", "x:2: not a blkparse event"},
      {TraceFormat::kBlkparse, "  8,0 3 1 0.0 697 Q W 8 8\n", "x:1: a Q event without"},
      {TraceFormat::kBlkparse, "  8,0 3 1 0.0 697 C W 8 + 8 [0]\n", "no Q (queued)"},
      {TraceFormat::kMsr, "1,usr,0,Erase,0,4096,1\n", "x:1: type must be Read or Write"},
      {TraceFormat::kMsr, "1,usr,0,Read,0,4096\n", "x:1: expected 7"},
      {TraceFormat::kCsv, "", "holds no requests"},
      // Our own CSV given as blkparse: one clear line, not a guess.
      {TraceFormat::kBlkparse, "ts_us,op,offset_bytes,length_bytes\n0,R,0,4096\n", "x:1: not a blkparse"},
  };
  for (const Case& c : cases) {
    Result<AdviseResult> r = Advise(Write("x", c.text), c.format);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(Advise(dir_.path() + "/none", TraceFormat::kCsv).status().code(), StatusCode::kNotFound);
}

TEST(TraceFormatTest, ParsesNamesAndRefusesOthers) {
  EXPECT_EQ(ParseTraceFormat("blkparse").value(), TraceFormat::kBlkparse);
  EXPECT_EQ(ParseTraceFormat("msr").value(), TraceFormat::kMsr);
  EXPECT_EQ(ParseTraceFormat("csv").value(), TraceFormat::kCsv);
  Result<TraceFormat> bad = ParseTraceFormat("json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("csv, blkparse or msr"), std::string::npos);
}

}  // namespace
}  // namespace cachecore::testing
