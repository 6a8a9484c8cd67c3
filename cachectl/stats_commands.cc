// stats and list: what a cache is doing, as a table, JSON or CSV.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "cli_common.h"
#include "commands.h"
#include "control.h"
#include "placement_commands.h"

namespace cachectl {

namespace po = boost::program_options;
using namespace cachecore;

namespace {

// A number, or a boolean field's value, goes into JSON bare; anything else
// as a string (a cache may well be named "true").
bool IsJsonLiteral(const std::string& key, const std::string& v) {
  if (key == "metadata_failed") return v == "true" || v == "false";
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

void PrintTable(const Fields& f) {
  for (const auto& [k, v] : f) std::printf("%-26s %s\n", k.c_str(), v.c_str());
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
  return f;
}

}  // namespace

int RunStats(const std::vector<std::string>& args) {
  std::string name;
  double watch = 0;
  CommonOptions common;
  po::options_description desc = common.Describe(
      "cachectl stats NAME [--json | --csv] [--watch SECONDS] [--reset]\n"
      "cachectl stats NAME --movement [--json]\n\n"
      "--movement: promotions, demotions and cleaner writes by hour over the last day,\n"
      "and the hottest regions of the volume.\n\nexample: cachectl stats data --json");
  desc.add_options()
      ("name", po::value(&name)->required(), "cache name")
      ("json", "one JSON object")
      ("csv", "a header line and a row")
      ("watch", po::value(&watch), "print again every SECONDS until interrupted")
      ("reset", "zero the counters after printing them")
      ("movement", "data movement by hour over the last day (with --json: one object)");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "stats", "name"); rc >= 0) return rc;
  if (vm.count("json") && vm.count("csv")) return Fail(kExitUsage, "stats: --json and --csv exclude each other");
  if (vm.count("movement") && (vm.count("csv") || vm.count("watch") || vm.count("reset"))) {
    return Fail(kExitUsage, "stats: --movement goes with --json only");
  }
  if (vm.count("watch") && !(watch > 0)) return Fail(kExitUsage, "stats: --watch needs a positive number of seconds");
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
  for (bool first = true;; first = false) {
    bool running = false;
    Result<Fields> described = Describe(dirs, name, vm.count("reset") > 0, &running);
    if (!described.ok()) return Fail(kExitRefused, "stats: " + described.status().message());
    const Fields& f = described.value();
    if (vm.count("json")) std::printf("%s\n", ToJson(f).c_str());
    else if (vm.count("csv")) std::printf("%s%s\n", first ? (CsvHeader(f) + "\n").c_str() : "", CsvRow(f).c_str());
    else PrintTable(f);
    std::fflush(stdout);
    if (!vm.count("watch")) return 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(watch));
    if (!vm.count("json") && !vm.count("csv")) std::printf("\n");
  }
}

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
  for (const std::string& name : ListCaches(dirs)) {
    bool running = false;
    Result<Fields> described = Describe(dirs, name, false, &running);
    Fields all = described.ok() ? described.value() : Fields{{"name", name}, {"state", "refused"}};
    Fields row;
    for (const char* c : kColumns) {
      std::string v;
      for (const auto& kv : all) if (kv.first == c) v = kv.second;
      row.push_back({c, v});
    }
    rows.push_back(row);
  }
  if (vm.count("json")) {
    std::printf("[");
    for (size_t i = 0; i < rows.size(); ++i) std::printf("%s%s", i ? ", " : "", ToJson(rows[i]).c_str());
    std::printf("]\n");
  } else if (vm.count("csv")) {
    std::printf("name,state,mode,origin,cache,dirty_lines,hit_ratio,kernel_device,dm_device\n");
    for (const Fields& r : rows) std::printf("%s\n", CsvRow(r).c_str());
  } else {
    std::printf("%-16s %-15s %-12s %-6s %-8s %s -> %s\n", "NAME", "STATE", "MODE", "DIRTY", "HIT", "ORIGIN", "CACHE");
    for (const Fields& r : rows) {
      std::string device = r[8].second.empty() ? "(NBD socket)" : r[8].second;
      std::printf("%-16s %-15s %-12s %-6s %-8s %-18s %s -> %s\n", r[0].second.c_str(), r[1].second.c_str(),
                  r[2].second.c_str(), r[5].second.c_str(), r[6].second.c_str(), device.c_str(),
                  r[3].second.c_str(), r[4].second.c_str());
    }
  }
  return 0;
}

}  // namespace cachectl
