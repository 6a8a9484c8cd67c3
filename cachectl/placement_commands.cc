// pin, unpin, pins and stats --movement: the pinned ranges of a running
// cache and where its data moved, hour by hour, over the last day.
#include <boost/program_options.hpp>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "cachecore/cache_mode.h"
#include "cli_common.h"
#include "commands.h"
#include "placement_commands.h"

namespace cachectl {

namespace po = boost::program_options;
using namespace cachecore;

namespace {

// "OFFSET:LENGTH", each a size with an optional K/M/G/T suffix.
Result<std::pair<uint64_t, uint64_t>> ParseRange(const std::string& text) {
  size_t colon = text.find(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("--range '" + text + "': expected OFFSET:LENGTH, e.g. 0:1G");
  }
  Result<uint64_t> offset = ParseSize(text.substr(0, colon));
  Result<uint64_t> length = ParseSize(text.substr(colon + 1));
  if (!offset.ok() || !length.ok()) {
    return Status::InvalidArgument("--range '" + text + "': " +
                                   (offset.ok() ? length : offset).status().message());
  }
  if (length.value() == 0) return Status::InvalidArgument("--range '" + text + "': the length is 0");
  return std::pair{offset.value(), length.value()};
}

// The comma-separated numbers of a data line's value.
std::vector<uint64_t> Numbers(const std::string& value) {
  std::vector<uint64_t> out;
  std::istringstream in(value);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::strtoull(item.c_str(), nullptr, 10));
  return out;
}

// Every value of `key` among the reply's data lines, in order.
std::vector<std::string> Values(const ControlReply& reply, const std::string& key) {
  std::vector<std::string> out;
  for (const std::string& kv : reply.data) {
    if (kv.compare(0, key.size() + 1, key + "=") == 0) out.push_back(kv.substr(key.size() + 1));
  }
  return out;
}

uint64_t Number(const ControlReply& reply, const std::string& key) {
  return std::strtoull(reply.Value(key).c_str(), nullptr, 10);
}

std::string Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? "-" : std::to_string(part * 100 / whole) + " %";
}

// pin and unpin: one range, changed by the daemon.
int ChangePin(const std::vector<std::string>& args, const std::string& verb, const std::string& usage,
              const std::string& done) {
  std::string name, range_text;
  CommonOptions common;
  po::options_description desc = common.Describe(usage);
  desc.add_options()
      ("name", po::value(&name)->required(), "cache name")
      ("range", po::value(&range_text)->required(), "OFFSET:LENGTH on the volume (K/M/G/T suffixes), "
                                                     "rounded out to whole cache lines");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, verb, "name"); rc >= 0) return rc;
  Result<std::pair<uint64_t, uint64_t>> range = ParseRange(range_text);
  if (!range.ok()) return Fail(kExitUsage, verb + ": " + range.status().message());
  if (int rc = common.RequireRoot(verb); rc != 0) return rc;
  ControlReply reply;
  auto [offset, length] = range.value();
  std::string command = verb + " " + std::to_string(offset) + " " + std::to_string(length);
  if (int rc = AskCache(common.dirs(), name, verb, command, &reply); rc != 0) return rc;
  std::printf("%s %s on %s; %s pinned of a %s limit\n", done.c_str(), range_text.c_str(), name.c_str(),
              HumanBytes(Number(reply, "pinned_bytes")).c_str(),
              HumanBytes(Number(reply, "pin_limit_bytes")).c_str());
  return 0;
}

}  // namespace

int RunPin(const std::vector<std::string>& args) {
  return ChangePin(args, "pin",
                   "cachectl pin NAME --range OFFSET:LENGTH\n\nKeeps a range of the volume in the cache: "
                   "never evicted, filled from the origin in the\nbackground at the placement rate "
                   "(cachectl set --placement-rate). At most half of\nthe cache may be pinned.\n\n"
                   "example: cachectl pin data --range 0:2G",
                   "pinned");
}

int RunUnpin(const std::vector<std::string>& args) {
  return ChangePin(args, "unpin",
                   "cachectl unpin NAME --range OFFSET:LENGTH\n\nUnpins what is pinned in the range; its "
                   "lines stay cached and are evicted by policy again.\n\nexample: cachectl unpin data --range 0:2G",
                   "unpinned");
}

int RunPins(const std::vector<std::string>& args) {
  std::string name;
  CommonOptions common;
  po::options_description desc = common.Describe(
      "cachectl pins NAME [--json]\n\nThe pinned ranges, how much of each is in the cache, and the limit."
      "\n\nexample: cachectl pins data");
  desc.add_options()("name", po::value(&name)->required(), "cache name")("json", "one JSON object");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "pins", "name"); rc >= 0) return rc;
  ControlReply reply;
  if (int rc = AskCache(common.dirs(), name, "pins", "pins", &reply); rc != 0) return rc;
  const uint64_t pinned = Number(reply, "pinned_bytes"), resident = Number(reply, "pinned_resident_bytes");
  const uint64_t limit = Number(reply, "pin_limit_bytes");
  if (vm.count("json")) {
    std::string ranges;
    for (const std::string& v : Values(reply, "pin")) {
      std::vector<uint64_t> n = Numbers(v);
      if (n.size() != 3) continue;
      ranges += std::string(ranges.empty() ? "" : ", ") + "{\"offset\": " + std::to_string(n[0]) +
                ", \"length\": " + std::to_string(n[1]) + ", \"resident_bytes\": " + std::to_string(n[2]) + "}";
    }
    std::printf("{\"pinned_bytes\": %llu, \"resident_bytes\": %llu, \"limit_bytes\": %llu, \"ranges\": [%s]}\n",
                static_cast<unsigned long long>(pinned), static_cast<unsigned long long>(resident),
                static_cast<unsigned long long>(limit), ranges.c_str());
    return 0;
  }
  std::printf("%-32s %-12s %s\n", "RANGE (OFFSET:LENGTH)", "SIZE", "RESIDENT");
  for (const std::string& v : Values(reply, "pin")) {
    std::vector<uint64_t> n = Numbers(v);
    if (n.size() != 3) continue;
    std::string range = std::to_string(n[0]) + ":" + std::to_string(n[1]);
    std::printf("%-32s %-12s %s\n", range.c_str(), HumanBytes(n[1]).c_str(), Percent(n[2], n[1]).c_str());
  }
  std::printf("pinned %s of a %s limit (half the cache); %s of it in the cache\n", HumanBytes(pinned).c_str(),
              HumanBytes(limit).c_str(), HumanBytes(resident).c_str());
  return 0;
}

namespace {

const char* kHourFields[] = {"promotions", "demotions", "cleaner_writes", "cleaned_bytes",
                             "placement_promotions", "placement_demotions", "pin_fills"};

std::string LocalHour(int64_t start, const char* format) {
  std::time_t t = static_cast<std::time_t>(start);
  std::tm local{};
  localtime_r(&t, &local);
  char text[32];
  std::strftime(text, sizeof(text), format, &local);
  return text;
}

void PrintMovementJson(const ControlReply& reply) {
  std::string hours, hottest;
  for (const std::string& v : Values(reply, "hour")) {
    std::vector<uint64_t> n = Numbers(v);
    if (n.size() != 8) continue;
    std::string h = "{\"hour_start\": " + std::to_string(n[0]) + ", \"hour\": " +
                    JsonString(LocalHour(static_cast<int64_t>(n[0]), "%Y-%m-%dT%H:%M%z"));
    for (size_t i = 0; i < 7; ++i) h += ", \"" + std::string(kHourFields[i]) + "\": " + std::to_string(n[i + 1]);
    hours += (hours.empty() ? "" : ", ") + h + "}";
  }
  for (const std::string& v : Values(reply, "hot")) {
    std::vector<uint64_t> n = Numbers(v);
    if (n.size() != 4) continue;
    hottest += std::string(hottest.empty() ? "" : ", ") + "{\"offset\": " + std::to_string(n[0]) +
               ", \"length\": " + std::to_string(n[1]) + ", \"accesses\": " + std::to_string(n[2]) +
               ", \"resident_bytes\": " + std::to_string(n[3]) + "}";
  }
  std::printf("{\"placement_window\": %s, \"placement_rate\": %llu, \"region_bytes\": %llu, "
              "\"hours\": [%s], \"hottest\": [%s]}\n",
              JsonString(reply.Value("placement_window")).c_str(),
              static_cast<unsigned long long>(Number(reply, "placement_rate")),
              static_cast<unsigned long long>(Number(reply, "region_bytes")), hours.c_str(), hottest.c_str());
}

void PrintMovementTable(const ControlReply& reply) {
  std::printf("placement window %s, rate %s/s\n\n", reply.Value("placement_window").c_str(),
              HumanBytes(Number(reply, "placement_rate")).c_str());
  std::printf("%-17s %9s %9s %8s %10s %10s %10s %9s\n", "HOUR (local)", "PROMOTED", "DEMOTED", "CLEANER",
              "CLEANED", "PLACED-IN", "PLACED-OUT", "PIN-FILL");
  for (const std::string& v : Values(reply, "hour")) {
    std::vector<uint64_t> n = Numbers(v);
    if (n.size() != 8) continue;
    std::printf("%-17s %9llu %9llu %8llu %10s %10llu %10llu %9llu\n",
                LocalHour(static_cast<int64_t>(n[0]), "%Y-%m-%d %H:00").c_str(),
                static_cast<unsigned long long>(n[1]), static_cast<unsigned long long>(n[2]),
                static_cast<unsigned long long>(n[3]), HumanBytes(n[4]).c_str(),
                static_cast<unsigned long long>(n[5]), static_cast<unsigned long long>(n[6]),
                static_cast<unsigned long long>(n[7]));
  }
  std::printf("(lines promoted and demoted by any cause; the cleaner's origin writes and the bytes they\n"
              " carried; the placement mover's promotions and demotions; pinned lines filled)\n\n");
  std::printf("hottest regions of the last 24 hours (regions of %s):\n",
              HumanBytes(Number(reply, "region_bytes")).c_str());
  std::printf("%-32s %12s %s\n", "RANGE (OFFSET:LENGTH)", "ACCESSES", "RESIDENT");
  for (const std::string& v : Values(reply, "hot")) {
    std::vector<uint64_t> n = Numbers(v);
    if (n.size() != 4) continue;
    std::string range = std::to_string(n[0]) + ":" + std::to_string(n[1]);
    std::printf("%-32s %12llu %s\n", range.c_str(), static_cast<unsigned long long>(n[2]),
                Percent(n[3], n[1]).c_str());
  }
}

}  // namespace

int PrintMovement(const Dirs& dirs, const std::string& name, bool json) {
  ControlReply reply;
  if (int rc = AskCache(dirs, name, "stats", "movement", &reply); rc != 0) return rc;
  if (json) PrintMovementJson(reply);
  else PrintMovementTable(reply);
  return 0;
}

}  // namespace cachectl
