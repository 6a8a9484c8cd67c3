// cachectl advise --trace FILE [--format csv|blkparse|msr] [--ram-cache SIZE] [--json] [--plot FILE.png]
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "cachecore/planning/advise.h"
#include "cli_common.h"
#include "commands.h"
#include "policy_options.h"
#include "plot.h"

namespace cachectl {

namespace po = boost::program_options;
using namespace cachecore;

namespace {

void PrintJson(const AdviseOptions& o, const AdviseResult& r) {
  std::printf("{\"trace\": %s, \"requests\": %llu, \"accesses\": %llu, \"footprint_blocks\": %llu, "
              "\"sampling_rate\": %.6f, \"policy\": \"%s\", \"ram_cache_bytes\": %llu, \"curve\": [",
              JsonString(o.trace_path).c_str(), (unsigned long long)r.requests, (unsigned long long)r.accesses,
              (unsigned long long)r.footprint_blocks, r.sampling_rate, PolicyName(o.policy),
              (unsigned long long)o.ram_cache_bytes);
  for (const CurvePoint& p : r.curve) {
    std::printf("%s{\"size_pct\": %u, \"cache_bytes\": %llu, \"hit_ratio\": %.4f, \"read_hit_ratio\": %.4f, "
                "\"ram_hit_ratio\": %.4f}",
                p.size_pct == 1 ? "" : ", ", p.size_pct, (unsigned long long)p.cache_bytes, p.hit_ratio,
                p.read_hit_ratio, p.ram_hit_ratio);
  }
  std::printf("], \"recommended_size_pct\": %u}\n", r.recommended_size_pct);
}

void PrintText(const AdviseOptions& o, const AdviseResult& r) {
  std::printf("footprint  %s (%llu blocks of 4 KiB)%s\n", HumanBytes(r.footprint_blocks * 4096).c_str(),
              (unsigned long long)r.footprint_blocks, r.sampling_rate < 1 ? ", estimated from a sample" : "");
  std::printf("accesses   %llu blocks in %llu requests\n", (unsigned long long)r.accesses,
              (unsigned long long)r.requests);
  const bool ram = o.ram_cache_bytes > 0;
  if (ram) std::printf("RAM tier   %s above the cache at every size\n", HumanBytes(o.ram_cache_bytes).c_str());
  std::printf("\n%6s  %12s  %9s  %14s%s\n", "size", "cache", "hit ratio", "read hit ratio", ram ? "  reads from RAM" : "");
  for (const CurvePoint& p : r.curve) {
    bool shown = p.size_pct <= 2 || p.size_pct % 5 == 0 || p.size_pct == r.recommended_size_pct;
    if (!shown) continue;
    char from_ram[24] = "";
    if (ram) std::snprintf(from_ram, sizeof(from_ram), "  %14.4f", p.ram_hit_ratio);
    std::printf("%5u%%  %12s  %9.4f  %14.4f%s%s\n", p.size_pct, HumanBytes(p.cache_bytes).c_str(), p.hit_ratio,
                p.read_hit_ratio, from_ram, p.size_pct == r.recommended_size_pct ? "   <- recommended" : "");
  }
  const CurvePoint& rec = r.curve[r.recommended_size_pct - 1];
  std::printf("\nrecommended: %u%% of the footprint (%s), the smallest size that reaches 90%% of the "
              "best hit ratio (%.4f of %.4f)\n", rec.size_pct, HumanBytes(rec.cache_bytes).c_str(), rec.hit_ratio,
              r.curve.back().hit_ratio);
}

// The curve and the recommended size, drawn with gnuplot.
int Plot(const AdviseOptions& o, const AdviseResult& r, const std::string& path) {
  const bool ram = o.ram_cache_bytes > 0;
  std::string body = "set xlabel 'cache size, % of the footprint'\nset ylabel 'hit ratio'\n"
                     "set yrange [0:1]\nset grid\nset key bottom right\n"
                     "set arrow from " + std::to_string(r.recommended_size_pct) +
                     ",0 to " + std::to_string(r.recommended_size_pct) + ",1 nohead dt 2\n"
                     "plot '-' with lines lw 2 title 'hit ratio', '-' with lines lw 2 title 'read hit ratio'" +
                     (ram ? ", '-' with lines lw 2 title 'reads from the RAM tier (" + HumanBytes(o.ram_cache_bytes) + ")'" : "") +
                     "\n";
  for (int pass = 0; pass < (ram ? 3 : 2); ++pass) {
    for (const CurvePoint& p : r.curve) {
      const double y = pass == 0 ? p.hit_ratio : pass == 1 ? p.read_hit_ratio : p.ram_hit_ratio;
      body += std::to_string(p.size_pct) + " " + std::to_string(y) + "\n";
    }
    body += "e\n";
  }
  return DrawPng("advise", path, body);
}

}  // namespace

int RunAdvise(const std::vector<std::string>& args) {
  po::options_description desc(
      "cachectl advise --trace FILE [options]\n\n"
      "The hit ratio a cache would reach at every size from 1% to 100% of the workload's footprint,\n"
      "and the smallest size worth having. Record a trace of your volume with\n"
      "  blktrace -d /dev/sdX -o - | blkparse -i - > trace.txt\n\n"
      "example: cachectl advise --trace trace.txt --format blkparse --plot curve.png\n"
      "example: cachectl advise --trace trace.txt --ram-cache 2G   (a two-level cache: RAM above the SSD)\n\noptions");
  std::string trace, format_text = "csv", plot, ram_text = "off";
  desc.add_options()
      ("help,h", "show this help")
      ("trace", po::value(&trace)->required(), "trace file, plain or zstd")
      ("format", po::value(&format_text), "csv (ts_us,op,offset_bytes,length_bytes; the default), "
                                           "blkparse (its text output) or msr (MSR Cambridge CSV)")
      ("ram-cache", po::value(&ram_text), "a RAM tier of this size above the cache at every point (as "
                                         "attach --ram-cache): the share of reads it serves")
      ("plot", po::value(&plot), "also draw the curve into this PNG file (needs gnuplot)")
      ("json", "print one JSON object with a point at every whole percent");
  PolicyOptions policy;
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
    return Fail(kExitUsage, std::string("advise: ") + e.what());
  }
  AdviseOptions o;
  o.trace_path = trace;
  Result<TraceFormat> format = ParseTraceFormat(format_text);
  if (!format.ok()) return Fail(kExitUsage, "advise: --format: " + format.status().message());
  o.format = format.value();
  if (int code = policy.Take("advise", &o.policy, &o.promote_after_hits); code != 0) return code;
  Result<uint64_t> ram = ParseSize(ram_text == "off" ? "0" : ram_text);  // any size: a plan, not this host
  if (!ram.ok()) return Fail(kExitUsage, "advise: --ram-cache '" + ram_text + "': a size such as 512M or 4G, or off");
  o.ram_cache_bytes = ram.value();
  std::string why;
  if (!plot.empty() && !CanWritePlot(plot, &why)) {
    return Fail(kExitUsage, "advise: --plot: cannot write " + plot + ": " + why);
  }
  Result<AdviseResult> r = AdviseCacheSize(o);
  if (!r.ok()) {
    ExitCode code = r.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
    return Fail(code, "advise: " + r.status().message());
  }
  if (vm.count("json")) PrintJson(o, r.value());
  else PrintText(o, r.value());
  return plot.empty() ? kExitOk : Plot(o, r.value(), plot);
}

}  // namespace cachectl
