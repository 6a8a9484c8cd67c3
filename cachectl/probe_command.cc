// cachectl probe DEV [--write [--force]] [--overprovision-sweep] [--duration S] [--json] [--plot F]
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>

#include "cachecore/devices/file_device.h"
#include "cachecore/planning/probe.h"
#include "cli_common.h"
#include "commands.h"
#include "plot.h"

namespace cachectl {

namespace po = boost::program_options;
using namespace cachecore;

namespace {

constexpr uint32_t kSweep[] = {0, 10, 20, 30};

std::string JsonNumber(const std::optional<double>& v, const char* format) {
  if (!v) return "null";
  char text[32];
  std::snprintf(text, sizeof(text), format, *v);
  return text;
}

void PrintProbe(const std::string& dev, const ProbeOptions& o, const ProbeResult& r, bool json) {
  if (json) {
    std::printf("{\"device\": %s, \"bytes\": %llu, \"seconds_per_test\": %.1f, \"seq_read_mb_s\": %.1f, "
                "\"rand_read_4k_iops\": %.0f, \"seq_write_mb_s\": %s, \"rand_write_4k_iops\": %s}\n",
                JsonString(dev).c_str(), (unsigned long long)r.device_bytes, o.seconds_per_test, r.seq_read_mb_s,
                r.rand_read_iops, JsonNumber(r.seq_write_mb_s, "%.1f").c_str(),
                JsonNumber(r.rand_write_iops, "%.0f").c_str());
    return;
  }
  std::printf("device      %s (%s)\n", dev.c_str(), HumanBytes(r.device_bytes).c_str());
  std::printf("seq read    %.1f MB/s (1 MiB requests, 4 in flight)\n", r.seq_read_mb_s);
  std::printf("rand read   %.0f IOPS (4 KiB, queue depth %u)\n", r.rand_read_iops, o.queue_depth);
  if (r.seq_write_mb_s) std::printf("seq write   %.1f MB/s\n", *r.seq_write_mb_s);
  if (r.rand_write_iops) std::printf("rand write  %.0f IOPS\n", *r.rand_write_iops);
  if (!r.seq_write_mb_s) std::printf("(write tests: --write, which destroys the device's data)\n");
}

void PrintSweep(const std::string& dev, const std::vector<OverprovisionPoint>& points, uint32_t pick,
                bool json) {
  if (json) {
    std::printf("{\"device\": %s, \"points\": [", JsonString(dev).c_str());
    for (size_t i = 0; i < points.size(); ++i) {
      std::printf("%s{\"unused_pct\": %u, \"rand_write_4k_iops\": %.0f}", i ? ", " : "", points[i].unused_pct,
                  points[i].rand_write_iops);
    }
    std::printf("], \"recommended_unused_pct\": %u}\n", pick);
    return;
  }
  std::printf("unused  4 KiB random write IOPS\n");
  for (const auto& p : points) std::printf("%4u %%  %.0f\n", p.unused_pct, p.rand_write_iops);
  std::printf("recommended: leave %u %% unused (the least that keeps 90 %% of the best write IOPS): "
              "cachectl attach ... --overprovision %u\n", pick, pick);
}

int PlotSweep(const std::vector<OverprovisionPoint>& points, const std::string& path) {
  std::string body = "set xlabel 'share of the SSD left unused, %'\nset ylabel '4 KiB random write IOPS'\n"
                     "set xrange [-5:35]\nset xtics 0,10,30\nset yrange [0:*]\nset grid\n"
                     "set style fill solid 0.6\nset boxwidth 6\n"
                     "plot '-' with boxes notitle\n";
  for (const auto& p : points) body += std::to_string(p.unused_pct) + " " + std::to_string(p.rand_write_iops) + "\n";
  return DrawPng("probe", path, body + "e\n");
}

// A destructive probe is refused on a device that holds something.
int RefuseIfInUse(BlockDevice& device, const std::string& path, bool force) {
  Result<std::string> contents = DescribeContents(device);
  if (!contents.ok()) return Fail(kExitFailed, "probe: cannot read " + path + ": " + contents.status().message());
  if (contents->empty() || force) return -1;
  return Fail(kExitRefused, "probe: " + path + " holds " + *contents +
                                "; --write would destroy it (add --force to write over it)");
}

}  // namespace

int RunProbe(const std::vector<std::string>& args) {
  po::options_description desc(
      "cachectl probe DEV [options]\n\n"
      "What an SSD does for a cache: sequential read MB/s and 4 KiB random read IOPS, and with\n"
      "--write (destructive) sequential write MB/s and 4 KiB random write IOPS.\n\n"
      "example: cachectl probe /dev/nvme0n1\n"
      "         cachectl probe /dev/nvme0n1 --overprovision-sweep --write --plot op.png\n\noptions");
  std::string device, plot;
  double duration = 3;
  desc.add_options()
      ("help,h", "show this help")
      ("device", po::value(&device)->required(), "the SSD (a block device or a file)")
      ("write", "also the write tests: everything on DEV is lost")
      ("force", "write even over a filesystem, a cache or a partition table")
      ("overprovision-sweep", "4 KiB random write IOPS with 0, 10, 20, 30 % left unused (needs --write)")
      ("duration", po::value(&duration), "seconds per test (default 3)")
      ("plot", po::value(&plot), "with --overprovision-sweep: draw it into this PNG file")
      ("json", "print one JSON object");
  po::positional_options_description pos;
  pos.add("device", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << desc;
      return kExitOk;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    return Fail(kExitUsage, std::string("probe: ") + e.what());
  }
  const bool write = vm.count("write"), sweep = vm.count("overprovision-sweep");
  if (!(duration > 0) || duration > 3600) return Fail(kExitUsage, "probe: --duration must be 0 < S <= 3600");
  if (sweep && !write) return Fail(kExitUsage, "probe: --overprovision-sweep writes the device: add --write");
  if (!plot.empty() && !sweep) return Fail(kExitUsage, "probe: --plot draws the --overprovision-sweep");
  std::string why;
  if (!plot.empty() && !CanWritePlot(plot, &why)) {
    return Fail(kExitUsage, "probe: --plot: cannot write " + plot + ": " + why);
  }
  FileDeviceOptions ao;
  ao.read_only = !write;
  Result<std::unique_ptr<BlockDevice>> dev = OpenFileDevice(device, ao);
  if (!dev.ok()) {
    ExitCode code = dev.status().code() == StatusCode::kBusy ? kExitRefused : kExitFailed;
    return Fail(code, "probe: " + dev.status().message());
  }
  if (write) {
    int refused = RefuseIfInUse(**dev, device, vm.count("force"));
    if (refused >= 0) return refused;
  }
  ProbeOptions o;
  o.seconds_per_test = duration;
  o.write = write;
  if (sweep) {
    Result<std::vector<OverprovisionPoint>> points = OverprovisionSweep(**dev, o, kSweep);
    if (!points.ok()) return Fail(kExitFailed, "probe: " + points.status().message());
    PrintSweep(device, *points, RecommendOverprovision(*points), vm.count("json"));
    return plot.empty() ? kExitOk : PlotSweep(*points, plot);
  }
  Result<ProbeResult> r = ProbeDevice(**dev, o);
  if (!r.ok()) return Fail(kExitFailed, "probe: " + r.status().message());
  PrintProbe(device, o, *r, vm.count("json"));
  return kExitOk;
}

}  // namespace cachectl
