// cachectl replay --trace FILE --cache-size SIZE [--format F] [--line-size 4K] [--policy P] [--json]
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>

#include "cachecore/planning/replay.h"
#include "cli_common.h"
#include "commands.h"
#include "policy_options.h"

namespace cachectl {

namespace po = boost::program_options;
using namespace cachecore;

namespace {

void PrintJson(const ReplayOptions& o, const ReplayResult& r) {
  const StatsSnapshot& s = r.stats;
  std::printf(
      "{\"trace\": %s, \"line_size\": %u, \"cache_lines\": %llu, \"footprint_blocks\": %llu, "
      "\"requests\": %llu, \"accesses\": %llu, \"read_hits\": %llu, \"read_misses\": %llu, "
      "\"write_hits\": %llu, \"write_misses\": %llu, \"hit_ratio\": %.4f, "
      "\"read_hit_ratio\": %.4f, \"evictions\": %llu, \"cleaner_writes\": %llu, "
      "\"policy\": \"%s\", \"promote_after_hits\": %s, \"policy_state\": %s, \"ram_cache_bytes\": %llu, "
      "\"ram_hits\": %llu, \"ram_hit_ratio\": %.4f}\n",
      JsonString(o.trace_path).c_str(), o.line_size, (unsigned long long)r.cache_lines,
      (unsigned long long)r.footprint_blocks, (unsigned long long)r.requests,
      (unsigned long long)r.accesses, (unsigned long long)s.read_hits,
      (unsigned long long)s.read_misses, (unsigned long long)s.write_hits,
      (unsigned long long)s.write_misses, s.hit_ratio(), s.read_hit_ratio(),
      (unsigned long long)s.evictions, (unsigned long long)s.cleaner_writes, PolicyName(o.policy),
      // S3-FIFO's setting; the adaptive policy chooses its own.
      o.policy == PolicyKind::kS3Fifo ? std::to_string(o.promote_after_hits).c_str() : "null",
      JsonString(s.policy).c_str(), (unsigned long long)o.ram_cache_bytes, (unsigned long long)s.ram_hits,
      s.ram_hit_ratio());
}

void PrintText(const ReplayOptions& o, const ReplayResult& r) {
  const StatsSnapshot& s = r.stats;
  std::printf("policy          %s\n", s.policy.c_str());
  std::printf("hit ratio       %.4f\n", s.hit_ratio());
  std::printf("read hit ratio  %.4f\n", s.read_hit_ratio());
  if (o.ram_cache_bytes > 0) std::printf("reads from RAM  %.4f\n", s.ram_hit_ratio());
  std::printf("accesses        %llu 4 KiB blocks in %llu requests\n",
              (unsigned long long)r.accesses, (unsigned long long)r.requests);
  std::printf("cache           %llu lines (footprint %llu blocks)\n",
              (unsigned long long)r.cache_lines, (unsigned long long)r.footprint_blocks);
}

}  // namespace

int RunReplay(const std::vector<std::string>& args) {
  po::options_description desc(
      "cachectl replay --trace FILE --cache-size SIZE [options]\n\n"
      "example: cachectl replay --trace ../shared/traces/arc_P2.csv.zst --cache-size 10% --json\n\noptions");
  std::string trace, size_text, line_text = "4K", cutoff_text = "0", format_text = "csv", ram_text = "off";
  PolicyOptions policy;
  desc.add_options()
      ("help,h", "show this help")
      ("trace", po::value(&trace)->required(), "trace file, plain or zstd")
      ("format", po::value(&format_text), "csv (the default), blkparse or msr (see cachectl advise)")
      ("cache-size", po::value(&size_text)->required(),
       "cache size: bytes with K/M/G/T, or a share of the footprint such as 10%")
      ("line-size", po::value(&line_text), "cache line size, 4K to 1M (default 4K)")
      ("seq-cutoff", po::value(&cutoff_text), "sequential cutoff (default 0: off)")
      ("ram-cache", po::value(&ram_text), "a RAM tier above the cache, at least 4M (default off)")
      ("json", "print one JSON object");
  policy.Describe(desc);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    if (vm.count("help")) {
      std::cout << desc;
      return kExitOk;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    return Fail(kExitUsage, std::string("replay: ") + e.what());
  }
  ReplayOptions o;
  o.trace_path = trace;
  Result<TraceFormat> format = ParseTraceFormat(format_text);
  if (!format.ok()) return Fail(kExitUsage, "replay: --format: " + format.status().message());
  o.format = format.value();
  Result<CacheSize> size = ParseCacheSize(size_text);
  if (!size.ok()) return Fail(kExitUsage, "replay: " + size.status().message());
  o.cache_size = size.value();
  Result<uint64_t> line = ParseSize(line_text);
  if (!line.ok()) return Fail(kExitUsage, "replay: --line-size: " + line.status().message());
  if (line.value() < 4096 || line.value() > (1u << 20) || (line.value() & (line.value() - 1))) {
    return Fail(kExitUsage, "replay: --line-size must be a power of two from 4K to 1M");
  }
  o.line_size = static_cast<uint32_t>(line.value());
  Result<uint64_t> cutoff = ParseSize(cutoff_text);
  if (!cutoff.ok()) return Fail(kExitUsage, "replay: --seq-cutoff: " + cutoff.status().message());
  o.sequential_cutoff = cutoff.value();
  Result<uint64_t> ram = ParseRamCache(ram_text);
  if (!ram.ok()) return Fail(kExitUsage, "replay: " + ram.status().message());
  o.ram_cache_bytes = ram.value();
  if (int code = policy.Take("replay", &o.policy, &o.promote_after_hits); code != 0) return code;

  Result<ReplayResult> r = ReplayTrace(o);
  if (!r.ok()) {
    ExitCode code = r.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
    return Fail(code, "replay: " + r.status().message());
  }
  if (vm.count("json")) PrintJson(o, r.value());
  else PrintText(o, r.value());
  return kExitOk;
}

}  // namespace cachectl
