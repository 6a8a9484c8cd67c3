// cachectl's Prometheus exposition, read back by the text format's rules
// (version 0.0.4): metric and label names, one HELP and one TYPE per
// family before its samples, samples of a family together, counters named
// _total, escaped label values, numbers; and the values against the fields.
#include "prometheus.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <regex>
#include <tuple>
#include <set>
#include <sstream>

namespace cachectl {
namespace {

Fields Running(const std::string& name) {
  return {{"name", name},           {"state", "running"},       {"mode", "writeback"},
          {"metadata_failed", "false"}, {"line_size", "65536"}, {"origin_bytes", "268435456"},
          {"capacity_lines", "16"}, {"occupancy_lines", "8"},   {"dirty_lines", "2"},
          {"dirty_target_pct", "10"}, {"read_hits", "18"},      {"read_misses", "6"},
          {"write_hits", "2"},      {"write_misses", "6"},      {"read_requests", "10"},
          {"read_hit_ratio", "0.7500"}, {"errors.cache.read", "0"}, {"errors.origin.write", "3"}};
}

struct Parsed {
  std::map<std::string, std::string> type, help;
  std::map<std::string, double> samples;  // "name{labels}" -> value
};

// Fails the test on any line the format does not allow.
Parsed Parse(const std::string& text) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+))");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge))");
  static const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^\\"\n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^\\"\n])*")*\})? (\S+))");
  Parsed p;
  std::set<std::string> finished;
  std::string current;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      EXPECT_FALSE(p.help.count(m[1])) << "two HELP lines for " << m[1];
      p.help[m[1]] = m[2];
    } else if (std::regex_match(line, m, type)) {
      EXPECT_FALSE(p.type.count(m[1])) << "two TYPE lines for " << m[1];
      EXPECT_TRUE(p.help.count(m[1])) << "TYPE before HELP for " << m[1];
      p.type[m[1]] = m[2];
      if (!current.empty()) finished.insert(current);
      current = m[1];
      EXPECT_FALSE(finished.count(current)) << current << " comes back after another family";
    } else if (std::regex_match(line, m, sample)) {
      const std::string name = m[1];
      EXPECT_EQ(name, current) << "a sample outside its family: " << line;
      EXPECT_TRUE(p.type.count(name)) << "a sample before its TYPE: " << line;
      char* end = nullptr;
      const std::string value = m[7];
      double v = std::strtod(value.c_str(), &end);
      EXPECT_EQ(*end, '\0') << "not a number: " << line;
      const std::string key = name + m[2].str();
      EXPECT_FALSE(p.samples.count(key)) << "a sample twice: " << line;
      p.samples[key] = v;
    } else {
      ADD_FAILURE() << "not a line of the format: '" << line << "'";
    }
  }
  for (const auto& [name, kind] : p.type) {
    const bool total = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
    EXPECT_EQ(kind == "counter", total) << name << ": counters, and only they, end in _total";
  }
  return p;
}

TEST(PrometheusTest, TheOutputFollowsTheTextFormat) {
  Fields stopped = {{"name", "old"}, {"state", "stopped"}};
  Parsed p = Parse(PrometheusText({Running("data"), Running("we\"ird\\name"), stopped}));
  EXPECT_EQ(p.samples.at(R"(cachectl_up{cache="data",mode="writeback"})"), 1);
  EXPECT_EQ(p.samples.at(R"(cachectl_up{cache="old",mode=""})"), 0);
  EXPECT_EQ(p.samples.at(R"(cachectl_up{cache="we\"ird\\name",mode="writeback"})"), 1);
  EXPECT_EQ(p.type.at("cachectl_blocks_total"), "counter");
  EXPECT_EQ(p.type.at("cachectl_read_hit_ratio"), "gauge");
}

TEST(PrometheusTest, ValuesAreTheFieldsInTheirUnits) {
  Parsed p = Parse(PrometheusText({Running("data")}));
  const std::string l = R"({cache="data",mode="writeback")";
  EXPECT_EQ(p.samples.at("cachectl_blocks_total" + l + R"(,result="read_hit"})"), 18);
  EXPECT_EQ(p.samples.at("cachectl_blocks_total" + l + R"(,result="write_miss"})"), 6);
  EXPECT_EQ(p.samples.at("cachectl_read_requests_total" + l + "}"), 10);
  EXPECT_EQ(p.samples.at("cachectl_dirty_lines" + l + "}"), 2);
  EXPECT_DOUBLE_EQ(p.samples.at("cachectl_dirty_target_ratio" + l + "}"), 0.1);
  EXPECT_DOUBLE_EQ(p.samples.at("cachectl_read_hit_ratio" + l + "}"), 0.75);
  EXPECT_EQ(p.samples.at("cachectl_errors_total" + l + R"(,error="origin_write"})"), 3);
  EXPECT_EQ(p.samples.at("cachectl_metadata_failed" + l + "}"), 0);
  EXPECT_EQ(p.samples.at("cachectl_line_size_bytes" + l + "}"), 65536);
  // A field the daemon did not send has no sample (and no family when no cache has it).
  EXPECT_FALSE(p.type.count("cachectl_cleaned_bytes_total"));
}

TEST(PrometheusTest, ACacheOfSeveralVolumesHasASampleForEach) {
  Fields f = Running("data");
  for (auto [i, name, hits] : {std::tuple{0, "data", "5"}, std::tuple{1, "lo.gs", "7"}}) {
    const std::string p = "volume." + std::to_string(i) + ".";
    f.insert(f.end(), {{p + "name", name}, {p + "read_hits", hits}, {p + "read_misses", "1"},
                       {p + "occupancy_lines", "3"}, {p + "read_requests", "2"}});
  }
  Parsed p = Parse(PrometheusText({f, Running("single")}));
  const std::string l = R"({cache="data",mode="writeback",volume="lo.gs")";
  EXPECT_EQ(p.samples.at("cachectl_volume_blocks_total" + l + R"(,result="read_hit"})"), 7);
  EXPECT_EQ(p.samples.at("cachectl_volume_occupied_lines" + l + "}"), 3);
  EXPECT_EQ(p.samples.at(R"(cachectl_volume_blocks_total{cache="data",mode="writeback",volume="data",result="read_hit"})"), 5);
  EXPECT_EQ(p.type.at("cachectl_volume_read_requests_total"), "counter");
  for (const auto& [key, value] : p.samples) {
    EXPECT_EQ(key.find("cache=\"single\",mode=\"writeback\",volume="), std::string::npos) << "one volume: no per-volume samples";
  }
}

TEST(PrometheusTest, EveryNameIsAValidMetricName) {
  const std::regex name("[a-zA-Z_:][a-zA-Z0-9_:]*");
  std::set<std::string> seen;
  for (const std::string& n : PrometheusMetricNames()) {
    EXPECT_TRUE(std::regex_match(n, name)) << n;
    EXPECT_TRUE(seen.insert(n).second) << n << " twice";
    EXPECT_EQ(n.rfind("cachectl_", 0), 0u) << n;
  }
}

}  // namespace
}  // namespace cachectl
