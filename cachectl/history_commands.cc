#include "history_commands.h"

#include <cstdio>
#include <ctime>

#include "cli_common.h"
#include "commands.h"
#include "plot.h"

namespace cachectl {

namespace {

std::string LocalMinute(int64_t t) {
  std::time_t when = static_cast<std::time_t>(t);
  std::tm local{};
  localtime_r(&when, &local);
  char text[24];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M", &local);
  return text;
}

void PrintJson(const HistoryReply& h) {
  std::printf("{\"line_size\": %llu, \"minutes\": [", static_cast<unsigned long long>(h.line_size));
  for (size_t i = 0; i < h.minutes.size(); ++i) {
    const HistoryMinute& m = h.minutes[i];
    std::printf("%s{\"minute_start\": %lld, \"read_hits\": %llu, \"read_misses\": %llu, \"write_hits\": %llu, "
                "\"write_misses\": %llu, \"dirty_bytes\": %llu, \"cleaner_writes\": %llu, \"cleaned_bytes\": %llu}",
                i ? ", " : "", static_cast<long long>(m.minute_start), static_cast<unsigned long long>(m.read_hits),
                static_cast<unsigned long long>(m.read_misses), static_cast<unsigned long long>(m.write_hits),
                static_cast<unsigned long long>(m.write_misses),
                static_cast<unsigned long long>(m.dirty_lines * h.line_size),
                static_cast<unsigned long long>(m.cleaner_writes), static_cast<unsigned long long>(m.cleaned_bytes));
  }
  std::printf("]}\n");
}

void PrintTable(const HistoryReply& h) {
  if (h.minutes.empty()) {
    std::printf("no minute kept yet: the daemon keeps one a minute since it started\n");
    return;
  }
  std::printf("%-16s %10s %9s %10s %9s %11s %9s %11s\n", "MINUTE", "READS", "READ HIT", "WRITES", "WRITE HIT",
              "DIRTY", "CLEANS", "CLEANED");
  for (const HistoryMinute& m : h.minutes) {
    const uint64_t reads = m.read_hits + m.read_misses, writes = m.write_hits + m.write_misses;
    std::printf("%-16s %10llu %9s %10llu %9s %11s %9llu %11s\n", LocalMinute(m.minute_start).c_str(),
                static_cast<unsigned long long>(reads), Percent(m.read_hits, reads).c_str(),
                static_cast<unsigned long long>(writes), Percent(m.write_hits, writes).c_str(),
                HumanBytes(m.dirty_lines * h.line_size).c_str(), static_cast<unsigned long long>(m.cleaner_writes),
                HumanBytes(m.cleaned_bytes).c_str());
  }
  std::printf("(reads and writes in 4 KiB blocks a minute; dirty data at the minute's end)\n");
}

int Plot(const HistoryReply& h, const std::string& path) {
  std::string data;
  for (const HistoryMinute& m : h.minutes) {
    data += std::to_string(m.minute_start) + " " + std::to_string(m.read_hits + m.write_hits) + " " +
            std::to_string(m.read_misses + m.write_misses) + " " +
            std::to_string(static_cast<double>(m.dirty_lines * h.line_size) / (1 << 20)) + " " +
            std::to_string(static_cast<double>(m.cleaned_bytes) / (1 << 20)) + "\n";
  }
  const std::string body =
      "set xdata time\nset timefmt '%s'\nset format x '%H:%M'\nset xlabel 'time'\n"
      "set ylabel '4 KiB blocks a minute'\nset y2label 'MiB'\nset y2tics\nset ytics nomirror\nset key top left\n"
      "$d << EOD\n" + data + "EOD\n"
      "plot $d using 1:2 with lines title 'hits', $d using 1:3 with lines title 'misses', "
      "$d using 1:4 axes x1y2 with lines title 'dirty (MiB)', $d using 1:5 axes x1y2 with lines title 'cleaned (MiB a minute)'\n";
  return DrawPng("stats", path, body);
}

}  // namespace

int PrintHistory(const Dirs& dirs, const std::string& name, bool json, const std::string& plot) {
  std::string why;
  if (!plot.empty() && !CanWritePlot(plot, &why)) return Fail(kExitUsage, "stats: --plot " + plot + ": " + why);
  ControlReply reply;
  HistoryReply history;
  if (int rc = AskCache(dirs, name, "stats", HistoryRequest{}, &reply); rc != 0) return rc;
  if (int rc = TakeReply("stats", DecodeHistoryReply(reply.data), &history); rc != 0) return rc;
  if (json) PrintJson(history);
  else PrintTable(history);
  if (plot.empty()) return 0;
  if (history.minutes.empty()) return Fail(kExitFailed, "stats: --plot: no minute kept yet, nothing to draw");
  return Plot(history, plot);
}

}  // namespace cachectl
