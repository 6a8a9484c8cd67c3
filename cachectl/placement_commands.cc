// pin, unpin, pins and stats --movement: the pinned ranges of a running
// cache and where its data moved, hour by hour, over the last day.
#include <boost/program_options.hpp>
#include <cstdio>
#include <ctime>

#include "cachecore/engine/cache_mode.h"
#include "cli_common.h"
#include "commands.h"
#include "control.h"
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

// pin and unpin: one range, changed by the daemon.
int ChangePin(const std::vector<std::string>& args, const std::string& verb, const std::string& usage,
              const std::string& done) {
  std::string name, range_text, volume;
  CommonOptions common;
  po::options_description desc = common.Describe(usage);
  desc.add_options()
      ("name", po::value(&name)->required(), "cache name")
      ("volume", po::value(&volume), "a range of this volume (cachectl add; default: the cache's own)")
      ("range", po::value(&range_text)->required(), "OFFSET:LENGTH on the volume (K/M/G/T suffixes), "
                                                     "rounded out to whole cache lines");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, verb, "name"); rc >= 0) return rc;
  Result<std::pair<uint64_t, uint64_t>> range = ParseRange(range_text);
  if (!range.ok()) return Fail(kExitUsage, verb + ": " + range.status().message());
  if (Status s = volume.empty() ? Status::Ok() : CheckName(volume); !s.ok()) {
    return Fail(kExitUsage, verb + ": --volume: " + s.message());
  }
  if (int rc = common.RequireRoot(verb); rc != 0) return rc;
  ByteRange bytes{range->first, range->second};
  Request request = verb == "pin" ? Request(PinRequest{bytes, volume}) : Request(UnpinRequest{bytes, volume});
  ControlReply reply;
  PinTotals totals;
  if (int rc = AskCache(common.dirs(), name, verb, request, &reply); rc != 0) return rc;
  if (int rc = TakeReply(verb, DecodePinTotals(reply.data), &totals); rc != 0) return rc;
  std::printf("%s %s on %s; %s pinned of a %s limit\n", done.c_str(), range_text.c_str(),
              (volume.empty() ? name : name + " volume " + volume).c_str(),
              HumanBytes(totals.pinned_bytes).c_str(), HumanBytes(totals.limit_bytes).c_str());
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
  PinsReply pins;
  if (int rc = AskCache(common.dirs(), name, "pins", PinsRequest{}, &reply); rc != 0) return rc;
  if (int rc = TakeReply("pins", DecodePinsReply(reply.data), &pins); rc != 0) return rc;
  const uint64_t pinned = pins.totals.pinned_bytes, resident = pins.totals.resident_bytes;
  const uint64_t limit = pins.totals.limit_bytes;
  if (vm.count("json")) {
    std::string ranges;
    for (size_t i = 0; i < pins.ranges.size(); ++i) {
      const PinnedRange& p = pins.ranges[i];
      const std::string vol = i < pins.volumes.size() ? pins.volumes[i] : "";
      ranges += std::string(ranges.empty() ? "" : ", ") + "{" +
                (vol.empty() ? "" : "\"volume\": \"" + vol + "\", ") + "\"offset\": " + std::to_string(p.offset) +
                ", \"length\": " + std::to_string(p.length) + ", \"resident_bytes\": " +
                std::to_string(p.resident_bytes) + "}";
    }
    std::printf("{\"pinned_bytes\": %llu, \"resident_bytes\": %llu, \"limit_bytes\": %llu, \"ranges\": [%s]}\n",
                static_cast<unsigned long long>(pinned), static_cast<unsigned long long>(resident),
                static_cast<unsigned long long>(limit), ranges.c_str());
    return 0;
  }
  std::printf("%-32s %-12s %s\n", "RANGE (OFFSET:LENGTH)", "SIZE", "RESIDENT");
  for (size_t i = 0; i < pins.ranges.size(); ++i) {
    const PinnedRange& p = pins.ranges[i];
    const std::string vol = i < pins.volumes.size() ? pins.volumes[i] : "";
    std::string range = (vol.empty() ? "" : vol + " ") + std::to_string(p.offset) + ":" + std::to_string(p.length);
    std::printf("%-32s %-12s %s\n", range.c_str(), HumanBytes(p.length).c_str(),
                Percent(p.resident_bytes, p.length).c_str());
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

// The seven counts of an hour, in the order of kHourFields.
std::vector<uint64_t> HourCounts(const MovementHour& h) {
  return {h.promotions,           h.demotions,           h.cleaner_writes, h.cleaned_bytes,
          h.placement_promotions, h.placement_demotions, h.pin_fills};
}

void PrintMovementJson(const MovementReply& reply) {
  std::string hours, hottest;
  for (const MovementHour& hour : reply.hours) {
    std::vector<uint64_t> n = HourCounts(hour);
    std::string h = "{\"hour_start\": " + std::to_string(hour.hour_start) + ", \"hour\": " +
                    JsonString(LocalHour(hour.hour_start, "%Y-%m-%dT%H:%M%z"));
    for (size_t i = 0; i < 7; ++i) h += ", \"" + std::string(kHourFields[i]) + "\": " + std::to_string(n[i]);
    hours += (hours.empty() ? "" : ", ") + h + "}";
  }
  for (const HotRegion& r : reply.hottest) {
    hottest += std::string(hottest.empty() ? "" : ", ") + "{\"offset\": " + std::to_string(r.offset) +
               ", \"length\": " + std::to_string(r.length) + ", \"accesses\": " + std::to_string(r.accesses) +
               ", \"resident_bytes\": " + std::to_string(r.resident_bytes) + "}";
  }
  std::printf("{\"placement_window\": %s, \"placement_rate\": %llu, \"region_bytes\": %llu, "
              "\"hours\": [%s], \"hottest\": [%s]}\n",
              JsonString(PlacementWindowText(reply.placement.window)).c_str(),
              static_cast<unsigned long long>(reply.placement.rate_bytes_per_s),
              static_cast<unsigned long long>(reply.region_bytes), hours.c_str(), hottest.c_str());
}

void PrintMovementTable(const MovementReply& reply) {
  std::printf("placement window %s, rate %s/s\n\n", PlacementWindowText(reply.placement.window).c_str(),
              HumanBytes(reply.placement.rate_bytes_per_s).c_str());
  std::printf("%-17s %9s %9s %8s %10s %10s %10s %9s\n", "HOUR (local)", "PROMOTED", "DEMOTED", "CLEANER",
              "CLEANED", "PLACED-IN", "PLACED-OUT", "PIN-FILL");
  for (const MovementHour& h : reply.hours) {
    std::printf("%-17s %9llu %9llu %8llu %10s %10llu %10llu %9llu\n",
                LocalHour(h.hour_start, "%Y-%m-%d %H:00").c_str(), static_cast<unsigned long long>(h.promotions),
                static_cast<unsigned long long>(h.demotions), static_cast<unsigned long long>(h.cleaner_writes),
                HumanBytes(h.cleaned_bytes).c_str(), static_cast<unsigned long long>(h.placement_promotions),
                static_cast<unsigned long long>(h.placement_demotions), static_cast<unsigned long long>(h.pin_fills));
  }
  std::printf("(lines promoted and demoted by any cause; the cleaner's origin writes and the bytes they\n"
              " carried; the placement mover's promotions and demotions; pinned lines filled)\n\n");
  std::printf("hottest regions of the last 24 hours (regions of %s):\n", HumanBytes(reply.region_bytes).c_str());
  std::printf("%-32s %12s %s\n", "RANGE (OFFSET:LENGTH)", "ACCESSES", "RESIDENT");
  for (const HotRegion& r : reply.hottest) {
    std::string range = std::to_string(r.offset) + ":" + std::to_string(r.length);
    std::printf("%-32s %12llu %s\n", range.c_str(), static_cast<unsigned long long>(r.accesses),
                Percent(r.resident_bytes, r.length).c_str());
  }
}

}  // namespace

int PrintMovement(const Dirs& dirs, const std::string& name, bool json) {
  ControlReply reply;
  MovementReply movement;
  if (int rc = AskCache(dirs, name, "stats", MovementRequest{}, &reply); rc != 0) return rc;
  if (int rc = TakeReply("stats", DecodeMovementReply(reply.data), &movement); rc != 0) return rc;
  if (json) PrintMovementJson(movement);
  else PrintMovementTable(movement);
  return 0;
}

}  // namespace cachectl
