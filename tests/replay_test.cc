// Trace replay through the real engine, and the trace reader under it.
#include <gtest/gtest.h>

#include <fstream>

#include "cachecore/planning/replay.h"
#include "cachecore/planning/trace_reader.h"
#include "support/engine_rig.h"

#ifndef CACHECTL_TRACES_DIR
#error "CACHECTL_TRACES_DIR must name ../shared/traces"
#endif

namespace cachecore::testing {
namespace {

std::string Trace(const std::string& name) { return std::string(CACHECTL_TRACES_DIR) + "/" + name; }

// The shared traces are part of the project's environment; their absence
// is a failure, never a skip.
TEST(ReplayTest, ArcP2AtTenPercentBeatsLru) {
  ReplayOptions o;
  o.trace_path = Trace("arc_P2.csv.zst");
  o.cache_size = ParseCacheSize("10%").value();
  Result<ReplayResult> r = ReplayTrace(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->footprint_blocks, 120308u);  // as traces/README.md says
  EXPECT_EQ(r->cache_lines, 12030u);
  const double kLru = 0.4933, kS3FifoT2 = 0.5701;
  EXPECT_GE(r->stats.hit_ratio(), kLru);
  EXPECT_GE(r->stats.hit_ratio(), kS3FifoT2 - 0.0005);
  EXPECT_EQ(r->stats.read_hit_ratio(), r->stats.hit_ratio());  // a read-only trace
}

class TraceFile : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  TempDir dir_;
};

TEST_F(TraceFile, ReadsPlainCsvWithHeader) {
  std::string p = Write("t.csv", "ts_us,op,offset_bytes,length_bytes\n0,R,4096,8192\n5,W,100,1\r\n");
  auto reader = TraceReader::Open(p);
  ASSERT_TRUE(reader.ok());
  TraceRecord r;
  ASSERT_TRUE(reader.value()->Next(&r).value());
  EXPECT_FALSE(r.is_write);
  EXPECT_EQ(r.offset, 4096u);
  EXPECT_EQ(r.length, 8192u);
  ASSERT_TRUE(reader.value()->Next(&r).value());
  EXPECT_TRUE(r.is_write);
  EXPECT_EQ(r.timestamp_us, 5u);
  EXPECT_FALSE(reader.value()->Next(&r).value());
}

TEST_F(TraceFile, MalformedLinesNameFileAndLine) {
  for (const char* bad : {"0,X,0,4096", "0,R,abc,4096", "0,R,0", "0,R,0,4096,9", "zz,R,0,1",
                          "0,R,-5,4096"}) {
    std::string p = Write("bad.csv", std::string("ts_us,op,offset_bytes,length_bytes\n0,R,0,4096\n") + bad + "\n");
    auto reader = TraceReader::Open(p);
    ASSERT_TRUE(reader.ok());
    TraceRecord r;
    ASSERT_TRUE(reader.value()->Next(&r).ok());
    Result<bool> next = reader.value()->Next(&r);
    ASSERT_FALSE(next.ok()) << bad;
    EXPECT_EQ(next.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(next.status().message().find("bad.csv:3:"), std::string::npos) << next.status().message();
  }
}

TEST_F(TraceFile, TruncatedZstdIsAnError) {
  std::ifstream in(Trace("tencent_cbs_sample.csv.zst"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  std::string p = Write("cut.csv.zst", bytes.substr(0, bytes.size() / 2));
  auto reader = TraceReader::Open(p);
  ASSERT_TRUE(reader.ok());
  TraceRecord r;
  Result<bool> next = true;
  while (next.ok() && next.value()) next = reader.value()->Next(&r);
  EXPECT_FALSE(next.ok());
}

TEST_F(TraceFile, MissingFileIsNotFound) {
  auto reader = TraceReader::Open(dir_.path() + "/none.csv");
  EXPECT_EQ(reader.status().code(), StatusCode::kNotFound);
}

TEST_F(TraceFile, ReplayCountsBlocksOfUnalignedRequests) {
  // 3 requests: blocks {0,1}, {1}, {5}; the second is a hit.
  std::string p = Write("small.csv", "0,R,100,5000\n1,R,4096,10\n2,W,20480,4096\n");
  ReplayOptions o;
  o.trace_path = p;
  o.cache_size = ParseCacheSize("100%").value();
  Result<ReplayResult> r = ReplayTrace(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->footprint_blocks, 3u);
  EXPECT_EQ(r->accesses, 4u);
  EXPECT_EQ(r->stats.read_hits, 1u);
  EXPECT_EQ(r->stats.write_misses, 1u);
}

TEST(CacheSizeTest, ParsesPercentAndBytes) {
  EXPECT_TRUE(ParseCacheSize("10%").value().is_percent);
  EXPECT_EQ(ParseCacheSize("64M").value().bytes, 64u << 20);
  EXPECT_FALSE(ParseCacheSize("0%").ok());
  EXPECT_FALSE(ParseCacheSize("101%").ok());
  EXPECT_FALSE(ParseCacheSize("ten").ok());
  EXPECT_FALSE(ParseCacheSize("5Q").ok());
}

}  // namespace
}  // namespace cachecore::testing
