// stats, top and list: what caches are doing, for people (stats_view.h)
// or programs (JSON, CSV).
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <thread>

#include "cli_common.h"
#include "commands.h"
#include "control.h"
#include "export_commands.h"
#include "history_commands.h"
#include "placement_commands.h"
#include "prometheus.h"
#include "stats_view.h"

namespace cachectl {

namespace po = boost::program_options;
using namespace cachecore;

namespace {

// A number, or a boolean field's value, goes into JSON bare; anything else
// as a string (a cache may well be named "true").
bool IsJsonLiteral(const std::string& key, const std::string& v) {
  if (key == "metadata_failed" || key == "live") return v == "true" || v == "false";
  return !v.empty() && v.find_first_not_of("0123456789.") == std::string::npos;
}

// Dotted keys ("errors.cache.read") become nested objects, in the order
// their first key came.
std::string ToJson(const Fields& f) {
  std::vector<std::string> order;
  std::map<std::string, std::string> leaves;
  std::map<std::string, Fields> groups;
  for (const auto& [k, v] : f) {
    size_t dot = k.find('.');
    std::string head = k.substr(0, dot);
    if (!leaves.count(head) && !groups.count(head)) order.push_back(head);
    if (dot == std::string::npos) leaves[head] = IsJsonLiteral(head, v) ? v : JsonString(v);
    else groups[head].push_back({k.substr(dot + 1), v});
  }
  std::string out = "{";
  for (const std::string& key : order) {
    out += (out.size() > 1 ? ", " : "") + JsonString(key) + ": " +
           (leaves.count(key) ? leaves[key] : ToJson(groups[key]));
  }
  return out + "}";
}

std::string CsvHeader(const Fields& f) {
  std::string out;
  for (const auto& kv : f) out += (out.empty() ? "" : ",") + kv.first;
  return out;
}

std::string CsvRow(const Fields& f) {
  std::string out;
  for (const auto& kv : f) out += (out.empty() ? "" : ",") + kv.second;
  return out;
}

// The fields of one cache: from its daemon when it runs, else from its
// saved configuration.
// A daemon that refuses (a reset by a user who may not) is an error.
Result<Fields> Describe(const Dirs& dirs, const std::string& name, bool reset, bool* running) {
  Fields f{{"name", name}};
  Result<CacheConfig> config = LoadConfig(dirs.ConfigFile(name));
  auto reply = SendControl(dirs.ControlSocket(name), StatsRequest{reset});
  if (reply.ok() && reply->exit_code != kExitOk) return Status::Busy(reply->message);
  *running = reply.ok();
  if (!*running) f.push_back({"state", "stopped"});
  if (*running) {
    Result<StatsReply> stats = DecodeStatsReply(reply->data);
    if (!stats.ok()) return Status::IoError("the daemon sent a malformed answer: " + stats.status().message());
    f.insert(f.end(), stats->fields.begin(), stats->fields.end());
  }
  if (config.ok()) {
    f.push_back({"origin", config.value()["origin"]});
    f.push_back({"cache", config.value()["cache"]});
  }
  f.push_back({"nbd_socket", *running ? dirs.NbdSocket(name) : ""});
  AddExportFields(dirs, name, &f);
  return f;
}

// The machine formats' fields: the schema's version first.
std::string PlainFields(const Fields& f) {
  std::string out;
  for (const auto& [k, v] : f) out += k + std::string(k.size() < 20 ? 20 - k.size() : 1, ' ') + v + "\n";
  return out;
}

Fields Versioned(const Fields& f) {
  Fields out{{"schema_version", std::to_string(kStatsSchemaVersion)}};
  out.insert(out.end(), f.begin(), f.end());
  return out;
}

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

std::string ClockText() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[16];
  std::strftime(text, sizeof(text), "%H:%M:%S", &local);
  return text;
}

// stats --watch in the human view: a row of rates an interval, as iostat's.
int WatchRates(const Dirs& dirs, const std::string& name, bool reset, double interval) {
  bool running = false;
  Result<Fields> before = Describe(dirs, name, reset, &running);
  if (!before.ok()) return Fail(kExitRefused, "stats: " + before.status().message());
  SteadyClock::time_point taken = SteadyClock::now();
  std::printf("%s", WatchHeader().c_str());
  std::fflush(stdout);
  for (;;) {
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
    Result<Fields> after = Describe(dirs, name, reset, &running);
    if (!after.ok()) return Fail(kExitRefused, "stats: " + after.status().message());
    if (!running) return Fail(kExitFailed, "stats: cache '" + name + "' stopped");
    const double seconds = SecondsSince(taken);
    taken = SteadyClock::now();
    std::printf("%s", WatchRow(ClockText(), RatesBetween(before.value(), after.value(), seconds, reset)).c_str());
    std::fflush(stdout);
    before = std::move(after);
  }
}

// For list and top: a cache's fields, or its name and "refused" when its
// daemon would not answer; `running` says whether a daemon answered.
Fields DescribeForTable(const Dirs& dirs, const std::string& name, bool* running) {
  Result<Fields> described = Describe(dirs, name, false, running);
  return described.ok() ? described.value() : Fields{{"name", name}, {"state", "refused"}};
}

}  // namespace

int RunStats(const std::vector<std::string>& args) {
  std::string name;
  double watch = 0;
  CommonOptions common;
  po::options_description desc = common.Describe(
      "cachectl stats NAME [--json | --csv | --prometheus] [--watch SECONDS [--cumulative]] [--reset]\n"
      "cachectl stats NAME --movement [--json]\n"
      "cachectl stats NAME --history [--json] [--plot FILE.png]\n"
      "cachectl stats NAME --volume VOLUME [--json | --csv]\n\n"
      "Without --json or --csv: the cache, its usage, requests, errors and settings,\n"
      "with units and percentages. --watch: the rates of each interval (--cumulative:\n"
      "the whole view again each interval; with --json or --csv: the raw counters).\n"
      "--movement: promotions, demotions and cleaner writes by hour over the last day,\n"
      "and the hottest regions of the volume.\n\nexample: cachectl stats data --watch 1");
  desc.add_options()
      ("name", po::value(&name)->required(), "cache name")
      ("json", "one JSON object")
      ("csv", "a header line and a row")
      ("prometheus", "Prometheus's text exposition format (the daemon serves it too: attach --listen)")
      ("watch", po::value(&watch), "print again every SECONDS until interrupted")
      ("cumulative", "with --watch: the counters since start, not the interval's rates")
      ("reset", "zero the counters after printing them")
      ("movement", "data movement by hour over the last day (with --json: one object)")
      ("history", "the last day a minute a row: hits, misses, dirty data, cleaning (with --json: one object)")
      ("plot", po::value<std::string>(), "with --history: also draw it to this PNG file (gnuplot)")
      ("volume", po::value<std::string>(), "one volume of the cache: its own figures (with --json or --csv too)");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "stats", "name"); rc >= 0) return rc;
  if (vm.count("json") + vm.count("csv") + vm.count("prometheus") > 1) {
    return Fail(kExitUsage, "stats: --json, --csv and --prometheus exclude each other");
  }
  if (vm.count("prometheus") && (vm.count("watch") || vm.count("movement"))) {
    return Fail(kExitUsage, "stats: --prometheus prints the counters once (Prometheus keeps the history)");
  }
  if (vm.count("movement") && (vm.count("csv") || vm.count("watch") || vm.count("reset"))) {
    return Fail(kExitUsage, "stats: --movement goes with --json only");
  }
  if (vm.count("history") && (vm.count("csv") || vm.count("watch") || vm.count("reset") || vm.count("movement") ||
                              vm.count("prometheus"))) {
    return Fail(kExitUsage, "stats: --history goes with --json and --plot only");
  }
  if (vm.count("plot") && !vm.count("history")) return Fail(kExitUsage, "stats: --plot goes with --history");
  if (vm.count("volume") && (vm.count("prometheus") || vm.count("watch") || vm.count("reset") || vm.count("movement") ||
                             vm.count("history"))) {
    return Fail(kExitUsage, "stats: --volume goes with --json or --csv only");
  }
  if (vm.count("watch") && !(watch > 0)) return Fail(kExitUsage, "stats: --watch needs a positive number of seconds");
  if (vm.count("cumulative") && !vm.count("watch")) return Fail(kExitUsage, "stats: --cumulative goes with --watch");
  Dirs dirs = common.dirs();
  if (access(dirs.ConfigFile(name).c_str(), F_OK) != 0) {
    // Not root, but maybe in the cache's socket group: its daemon answers.
    bool hidden = errno == EACCES;
    if (!hidden) return Fail(kExitNotFound, "stats: no cache named '" + name + "'");
    if (!SendControl(dirs.ControlSocket(name), StatsRequest{}).ok()) {
      return Fail(kExitRefused, "stats: permission denied: cache '" + name +
                                    "' is root's, and its group (if any) does not include you");
    }
  }
  if (vm.count("movement")) return PrintMovement(dirs, name, vm.count("json") > 0);
  if (vm.count("history")) {
    return PrintHistory(dirs, name, vm.count("json") > 0, vm.count("plot") ? vm["plot"].as<std::string>() : "");
  }
  if (vm.count("volume")) {
    bool running = false;
    Result<Fields> described = Describe(dirs, name, false, &running);
    if (!described.ok()) return Fail(kExitRefused, "stats: " + described.status().message());
    Result<Fields> view = VolumeView(described.value(), name, vm["volume"].as<std::string>());
    if (!view.ok()) return Fail(kExitNotFound, "stats: " + view.status().message());
    const Fields f = Versioned(view.value());
    if (vm.count("json")) std::printf("%s\n", ToJson(f).c_str());
    else if (vm.count("csv")) std::printf("%s\n%s\n", CsvHeader(f).c_str(), CsvRow(f).c_str());
    else std::printf("%s", PlainFields(view.value()).c_str());
    return 0;
  }
  const bool human = !vm.count("json") && !vm.count("csv") && !vm.count("prometheus");
  if (human && vm.count("watch") && !vm.count("cumulative")) return WatchRates(dirs, name, vm.count("reset"), watch);
  for (bool first = true;; first = false) {
    bool running = false;
    Result<Fields> described = Describe(dirs, name, vm.count("reset") > 0, &running);
    if (!described.ok()) return Fail(kExitRefused, "stats: " + described.status().message());
    const Fields f = Versioned(described.value());
    if (vm.count("prometheus")) std::printf("%s", PrometheusText({described.value()}).c_str());
    else if (vm.count("json")) std::printf("%s\n", ToJson(f).c_str());
    else if (vm.count("csv")) std::printf("%s%s\n", first ? (CsvHeader(f) + "\n").c_str() : "", CsvRow(f).c_str());
    else std::printf("%s", HumanStats(described.value()).c_str());
    std::fflush(stdout);
    if (!vm.count("watch")) return 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(watch));
    if (human) std::printf("\n");
  }
}

namespace {

// Field KEY of volume VOLUME in cache NAME's stats; "" when the cache
// does not run or has no such volume.
std::string VolumeField(const Fields& all, const std::string& name, const std::string& volume,
                        const std::string& key) {
  Result<Fields> view = VolumeView(all, name, volume);
  return view.ok() ? FieldView(view.value()).Text(key) : "";
}

}  // namespace

int RunList(const std::vector<std::string>& args) {
  CommonOptions common;
  po::options_description desc = common.Describe("cachectl list [--json | --csv]\n\nexample: cachectl list");
  desc.add_options()("json", "a JSON array")("csv", "a header line and a row per cache");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "list"); rc >= 0) return rc;
  Dirs dirs = common.dirs();
  static const char* kColumns[] = {"name", "state", "mode", "origin", "cache", "dirty_lines",
                                   "hit_ratio", "kernel_device", "dm_device"};
  std::vector<Fields> rows;
  std::vector<std::vector<std::string>> human;  // SIZE, USED, DIRTY, HIT
  std::vector<std::string> volume_lines;        // a line per added volume
  for (const std::string& name : ListCaches(dirs)) {
    bool running = false;
    const Fields all = DescribeForTable(dirs, name, &running);
    const FieldView view(all);
    Fields row;
    for (const char* c : kColumns) row.push_back({c, view.Text(c)});
    // Raw bytes for programs, empty for a cache that does not run.
    const uint64_t line = view.Count("line_size");
    row.push_back({"capacity_bytes", running ? std::to_string(view.Count("capacity_lines") * line) : ""});
    row.push_back({"occupied_bytes", running ? std::to_string(view.Count("occupancy_lines") * line) : ""});
    row.push_back({"nvme_export", view.Text("nvme_export.address")});
    // The volumes added to it (cachectl add), by name; the cache's own is its name.
    std::string added, lines;
    Result<std::vector<ListedVolume>> listed = LoadListedVolumes(dirs, name);
    for (const ListedVolume& v : listed.ok() ? listed.value() : std::vector<ListedVolume>{}) {
      added += (added.empty() ? "" : ";") + v.name + "=" + v.origin;
      std::string device = VolumeField(all, name, v.name, "dm_device");
      if (device.empty()) device = "(NBD export " + v.name + ")";
      char line[512];
      std::snprintf(line, sizeof(line), "  + volume %-22s %-46s  %-18s %s\n", v.name.c_str(), "", device.c_str(),
                    v.origin.c_str());
      lines += line;
    }
    row.push_back({"volumes", added});
    rows.push_back(row);
    volume_lines.push_back(lines);
    human.push_back({CapacityText(view), OccupancyText(view), DirtyText(view), HitRatioText(view)});
  }
  if (vm.count("json")) {
    std::printf("[");
    for (size_t i = 0; i < rows.size(); ++i) std::printf("%s%s", i ? ", " : "", ToJson(rows[i]).c_str());
    std::printf("]\n");
  } else if (vm.count("csv")) {
    std::printf("name,state,mode,origin,cache,dirty_lines,hit_ratio,kernel_device,dm_device,capacity_bytes,occupied_bytes,nvme_export,volumes\n");
    for (const Fields& r : rows) std::printf("%s\n", CsvRow(r).c_str());
  } else {
    std::printf("%-16s %-15s %-12s %10s %7s %7s %7s  %-18s %s\n", "NAME", "STATE", "MODE", "SIZE", "USED", "DIRTY",
                "HIT", "DEVICE", "ORIGIN -> CACHE");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Fields& r = rows[i];
      const std::vector<std::string>& h = human[i];
      std::string device = r[8].second.empty() ? "(NBD socket)" : r[8].second;
      if (!r[11].second.empty()) device += " +nvme-tcp " + r[11].second;
      std::printf("%-16s %-15s %-12s %10s %7s %7s %7s  %-18s %s -> %s\n", r[0].second.c_str(), r[1].second.c_str(),
                  r[2].second.c_str(), h[0].c_str(), h[1].c_str(), h[2].c_str(), h[3].c_str(), device.c_str(),
                  r[3].second.c_str(), r[4].second.c_str());
      std::printf("%s", volume_lines[i].c_str());
    }
  }
  return 0;
}

int RunTop(const std::vector<std::string>& args) {
  CommonOptions common;
  double interval = 1;
  po::options_description desc = common.Describe(
      "cachectl top [--once] [--interval SECONDS]\n\n"
      "Every cache on one screen, a row each: its size, how full and how dirty it is,\n"
      "and over the last interval its read hit ratio, IOPS and the cleaner's rate.\n"
      "Refreshed every interval until interrupted; --once prints one frame.\n\nexample: cachectl top");
  desc.add_options()("once", "one frame (after one interval), then exit")(
      "interval", po::value(&interval), "seconds between frames (default 1)");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "top"); rc >= 0) return rc;
  if (!(interval > 0)) return Fail(kExitUsage, "top: --interval needs a positive number of seconds");
  Dirs dirs = common.dirs();
  const bool screen = isatty(STDOUT_FILENO) && !vm.count("once");
  auto sample = [&] {
    std::map<std::string, Fields> all;
    for (const std::string& name : ListCaches(dirs)) {
      bool running = false;
      all[name] = DescribeForTable(dirs, name, &running);
    }
    return all;
  };
  std::map<std::string, Fields> before = sample();
  SteadyClock::time_point taken = SteadyClock::now();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
    std::map<std::string, Fields> after = sample();
    const double seconds = SecondsSince(taken);
    taken = SteadyClock::now();
    std::string frame = screen ? "\033[H\033[2J" : "";
    frame += ClockText() + "  caches: " + std::to_string(after.size()) + "\n" + TopHeader();
    for (const auto& [name, fields] : after) {
      auto was = before.find(name);
      frame += TopRow(fields, RatesBetween(was == before.end() ? fields : was->second, fields, seconds));
    }
    std::printf("%s%s", frame.c_str(), screen ? "" : "\n");
    std::fflush(stdout);
    if (vm.count("once")) return 0;
    before = std::move(after);
  }
}

}  // namespace cachectl
