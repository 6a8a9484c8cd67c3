#include "stats_view.h"

#include <cstdio>
#include <cstdlib>

namespace cachectl {

namespace {

constexpr double kMB = 1e6;

// printf into a string of the length it needs (paths may be long).
std::string Format(const char* fmt, auto... args) {
  const int length = std::snprintf(nullptr, 0, fmt, args...);
  if (length <= 0) return {};
  std::string text(static_cast<size_t>(length) + 1, '\0');
  std::snprintf(text.data(), text.size(), fmt, args...);
  text.pop_back();
  return text;
}

// "  label         value" lines, the values in one column.
void Line(std::string& out, const std::string& label, const std::string& value) {
  out += Format("  %-20s %s\n", label.c_str(), value.c_str());
}

// A size and its share of `whole`: "  dirty      8.0 MiB    3.3 %".
void SizeLine(std::string& out, const std::string& label, uint64_t bytes, uint64_t whole) {
  out += Format("  %-20s %12s %9s\n", label.c_str(), HumanBytes(bytes).c_str(), Percent(bytes, whole).c_str());
}

// A count, its unit, and its share of `whole`.
void CountLine(std::string& out, const std::string& label, uint64_t n, const char* unit, uint64_t whole,
               const char* of) {
  out += Format("  %-20s %12llu %-8s %9s %s\n", label.c_str(), static_cast<unsigned long long>(n), unit,
                Percent(n, whole).c_str(), of);
}

std::string DeviceText(const FieldView& v) {
  const std::string& dm = v.Text("dm_device");
  const std::string& kernel = v.Text("kernel_device");
  if (!dm.empty()) return kernel.empty() ? dm : dm + " (over " + kernel + ")";
  if (!kernel.empty()) return kernel;
  return "nbd+unix:///?socket=" + v.Text("nbd_socket");
}

std::string NbdTcpText(const FieldView& v) {
  const std::string& tls = v.Text("nbd_tls");
  const char* how = tls == "psk" ? "TLS with a pre-shared key" : tls == "x509" ? "TLS with X.509 certificates"
                                                                             : "plain, without TLS";
  return v.Text("nbd_tcp") + ", " + how;
}

std::string ExportText(const FieldView& v) {
  std::string text = "nvme-tcp " + v.Text("nvme_export.address") + " as " + v.Text("nvme_export.nqn") +
                     " to " + v.Text("nvme_export.hosts");
  return v.Text("nvme_export.live") == "true" ? text : text + " (recorded, not served now)";
}

void CacheSection(std::string& out, const FieldView& v) {
  std::string head = v.Text("name") + ": " + v.Text("state");
  if (v.running()) head += ", " + v.Text("mode") + ", " + v.Text("policy");
  out += head + "\n";
  const uint64_t line = v.Count("line_size");
  if (v.running()) Line(out, "device", DeviceText(v));
  if (!v.Text("nbd_tcp").empty()) Line(out, "NBD over TCP", NbdTcpText(v));
  if (!v.Text("nvme_export.address").empty()) Line(out, "exported", ExportText(v));
  // The paths come from the saved configuration, which a member of the
  // cache's socket group may not read: the sizes come from the daemon.
  auto with = [](const std::string& path, const std::string& more) { return path.empty() ? more : path + ", " + more; };
  std::string origin = v.Text("origin"), cache = v.Text("cache");
  if (v.running()) {
    origin = with(origin, HumanBytes(v.Count("origin_bytes")));
    cache = with(cache, HumanBytes(v.Count("cache_device_bytes")) + ", lines of " + HumanBytes(line));
  }
  Line(out, "origin", origin);
  Line(out, "cache device", cache);
  if (v.running()) Line(out, "front end", v.Text("frontend") + "; started from " + v.Text("started_from"));
}

void UsageSection(std::string& out, const FieldView& v) {
  const uint64_t line = v.Count("line_size");
  const uint64_t capacity = v.Count("capacity_lines") * line;
  const uint64_t occupied = v.Count("occupancy_lines") * line;
  out += Format("\nusage%*s %9s\n", 30, "size", "capacity");
  SizeLine(out, "capacity", capacity, capacity);
  SizeLine(out, "occupied", occupied, capacity);
  SizeLine(out, "clean", v.Count("clean_lines") * line, capacity);
  SizeLine(out, "dirty", v.Count("dirty_lines") * line, capacity);
  SizeLine(out, "free", capacity - std::min(capacity, occupied), capacity);
  SizeLine(out, "pinned", v.Count("pinned_bytes"), capacity);
  SizeLine(out, "over-provisioned", v.Count("overprovisioned_bytes"), capacity);
  if (const uint64_t ram = v.Count("ram_cache_bytes"); ram != 0) {
    Line(out, "RAM tier", HumanBytes(v.Count("ram_used_bytes")) + " held of " + HumanBytes(ram));
  }
}

void RequestSection(std::string& out, const FieldView& v) {
  const uint64_t requests = v.Count("read_requests") + v.Count("write_requests");
  const uint64_t read_blocks = v.Count("read_hits") + v.Count("read_misses");
  const uint64_t blocks = read_blocks + v.Count("write_hits") + v.Count("write_misses");
  const uint64_t line = v.Count("line_size");
  out += "\nrequests since start (or the last reset)\n";
  CountLine(out, "reads", v.Count("read_requests"), "requests", requests, "of requests");
  CountLine(out, "writes", v.Count("write_requests"), "requests", requests, "of requests");
  CountLine(out, "bypassed (cutoff)", v.Count("bypassed"), "requests", requests, "of requests");
  Line(out, "read, written", HumanBytes(v.Count("read_bytes")) + ", " + HumanBytes(v.Count("write_bytes")));
  CountLine(out, "read hits", v.Count("read_hits"), "blocks", blocks, "of 4 KiB blocks");
  CountLine(out, "read misses", v.Count("read_misses"), "blocks", blocks, "of 4 KiB blocks");
  CountLine(out, "write hits", v.Count("write_hits"), "blocks", blocks, "of 4 KiB blocks");
  CountLine(out, "write misses", v.Count("write_misses"), "blocks", blocks, "of 4 KiB blocks");
  Line(out, "read hit ratio", Percent(v.Count("read_hits"), read_blocks));
  Line(out, "hit ratio", Percent(v.Count("read_hits") + v.Count("write_hits"), blocks));
  if (v.Count("ram_cache_bytes") != 0) {
    Line(out, "RAM tier hits", Format("%llu blocks, %s of reads", static_cast<unsigned long long>(v.Count("ram_hits")),
                                      Percent(v.Count("ram_hits"), read_blocks).c_str()));
  }
  auto lines = [&](const char* key) {
    return Format("%llu lines, %s", static_cast<unsigned long long>(v.Count(key)),
                  HumanBytes(v.Count(key) * line).c_str());
  };
  Line(out, "promotions", lines("promotions"));
  Line(out, "evictions", lines("evictions"));
  Line(out, "cleaner writes", Format("%llu, %s cleaned", static_cast<unsigned long long>(v.Count("cleaner_writes")),
                                     HumanBytes(v.Count("cleaned_bytes")).c_str()));
  Line(out, "cleaner", v.Text("cleaner_state") + ", " + HumanBytes(v.Count("writeback_rate")) + "/s over its last second");
  Line(out, "throttled writes", std::to_string(v.Count("throttled_writes")) + " (slowed past the high watermark)");
  Line(out, "no clean line", std::to_string(v.Count("bypassed_no_space")) +
                                 " lines went around the cache (misses served from the origin, writes written there)");
}

void ErrorSection(std::string& out, const Fields& fields) {
  std::string listed;
  for (const auto& [key, value] : fields) {
    if (key.rfind("errors.", 0) != 0 || value == "0") continue;
    std::string what = key.substr(7);
    for (char& c : what) c = c == '.' || c == '_' ? ' ' : c;
    listed += Format("  %-20s %s\n", what.c_str(), value.c_str());
  }
  out += listed.empty() ? "\nerrors: none\n" : "\nerrors\n" + listed;
}

void SettingsSection(std::string& out, const FieldView& v) {
  out += "\nsettings\n";
  const uint64_t cutoff = v.Count("seq_cutoff");
  Line(out, "sequential cutoff", cutoff == 0 ? "off" : HumanBytes(cutoff) + " of a stream");
  Line(out, "dirty watermarks", Format("target %s %%, low %s %%, high %s %%", v.Text("dirty_target_pct").c_str(),
                                       v.Text("dirty_low_pct").c_str(), v.Text("dirty_high_pct").c_str()));
  Line(out, "cleaner batch", v.Text("cleaner_batch_lines") + " lines");
  const std::string& window = v.Text("placement_window");
  Line(out, "placement", window == "off" ? "off" : window + " at " + HumanBytes(v.Count("placement_rate")) + "/s");
  Line(out, "pin limit", HumanBytes(v.Count("pin_limit_bytes")));
  const uint64_t ram = v.Count("ram_cache_bytes");
  Line(out, "RAM tier", ram == 0 ? "off" : HumanBytes(ram));
  Line(out, "NBD clients", "at most " + v.Text("nbd_max_connections") + " at once");
}

// Now less before; now itself when the counters were reset in between
// (by the sampler's own --reset, or a counter that went down).
uint64_t Delta(const FieldView& before, const FieldView& after, const char* key, bool reset) {
  const uint64_t b = before.Count(key), a = after.Count(key);
  return !reset && a >= b ? a - b : a;
}

std::string PctText(const std::optional<double>& pct) { return pct ? Format("%.1f %%", *pct) : "-"; }

}  // namespace

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return Format("%.1f %s", v, units[u]);
}

std::string Percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  return Format("%.1f %%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

FieldView::FieldView(const Fields& fields) {
  for (const auto& [key, value] : fields) values_[key] = value;
}

const std::string& FieldView::Text(const std::string& key) const {
  static const std::string kNone;
  auto it = values_.find(key);
  return it == values_.end() ? kNone : it->second;
}

uint64_t FieldView::Count(const std::string& key) const {
  const std::string& text = Text(key);
  char* end = nullptr;
  const unsigned long long n = std::strtoull(text.c_str(), &end, 10);
  return text.empty() || *end != '\0' ? 0 : n;
}

uint64_t FieldView::Errors() const {
  uint64_t sum = 0;
  for (const auto& [key, value] : values_) {
    if (key.rfind("errors.", 0) == 0) sum += Count(key);
  }
  return sum;
}

std::string HumanStats(const Fields& fields) {
  const FieldView v(fields);
  std::string out;
  CacheSection(out, v);
  if (!v.running()) return out;
  UsageSection(out, v);
  RequestSection(out, v);
  ErrorSection(out, fields);
  SettingsSection(out, v);
  return out;
}

IntervalRates RatesBetween(const Fields& before_fields, const Fields& after_fields, double seconds,
                           bool reset_at_each_sample) {
  const FieldView before(before_fields), after(after_fields);
  IntervalRates r;
  // A cache that did not run at the first sample has no interval yet: its
  // counters are its whole run, not this interval's.
  if (!before.running() || !after.running()) return r;
  auto delta = [&](const char* key) { return Delta(before, after, key, reset_at_each_sample); };
  auto per_s = [&](const char* key) { return static_cast<double>(delta(key)) / seconds; };
  r.read_iops = per_s("read_requests");
  r.write_iops = per_s("write_requests");
  r.read_mb_per_s = per_s("read_bytes") / kMB;
  r.write_mb_per_s = per_s("write_bytes") / kMB;
  const uint64_t read_hits = delta("read_hits");
  const uint64_t reads = read_hits + delta("read_misses");
  const uint64_t hits = read_hits + delta("write_hits");
  const uint64_t blocks = reads + delta("write_hits") + delta("write_misses");
  if (reads > 0) r.read_hit_pct = 100.0 * static_cast<double>(read_hits) / static_cast<double>(reads);
  if (blocks > 0) r.hit_pct = 100.0 * static_cast<double>(hits) / static_cast<double>(blocks);
  r.promotions_per_s = per_s("promotions");
  r.evictions_per_s = per_s("evictions");
  const uint64_t line = after.Count("line_size");
  r.dirty_bytes = after.Count("dirty_lines") * line;
  const double dirty_before = static_cast<double>(before.Count("dirty_lines") * line);
  r.dirty_mb_per_s = (static_cast<double>(r.dirty_bytes) - dirty_before) / seconds / kMB;
  r.cleaner_mb_per_s = per_s("cleaned_bytes") / kMB;
  return r;
}

std::string WatchHeader() {
  return Format("%-8s %9s %8s %9s %8s %7s %7s %8s %8s %10s %9s %9s\n", "time", "rd IOPS", "rd MB/s", "wr IOPS",
                "wr MB/s", "rd hit", "hit", "promo/s", "evict/s", "dirty", "dirty/s", "clean/s");
}

std::string WatchRow(const std::string& clock, const IntervalRates& r) {
  return Format("%-8s %9.0f %8.1f %9.0f %8.1f %7s %7s %8.0f %8.0f %10s %+6.1f MB %6.1f MB\n", clock.c_str(),
                r.read_iops, r.read_mb_per_s, r.write_iops, r.write_mb_per_s, PctText(r.read_hit_pct).c_str(),
                PctText(r.hit_pct).c_str(), r.promotions_per_s, r.evictions_per_s, HumanBytes(r.dirty_bytes).c_str(),
                r.dirty_mb_per_s, r.cleaner_mb_per_s);
}

std::string TopHeader() {
  return Format("%-16s %-8s %-13s %10s %7s %7s %7s %8s %9s %6s\n", "NAME", "STATE", "MODE", "SIZE", "USED", "DIRTY",
                "RD HIT", "IOPS", "CLEAN/s", "ERRORS");
}

std::string TopRow(const Fields& after, const IntervalRates& r) {
  const FieldView v(after);
  if (!v.running()) return Format("%-16s %-8s\n", v.Text("name").c_str(), v.Text("state").c_str());
  return Format("%-16s %-8s %-13s %10s %7s %7s %7s %8.0f %6.1f MB %6llu\n", v.Text("name").c_str(),
                v.Text("state").c_str(), v.Text("mode").c_str(), CapacityText(v).c_str(), OccupancyText(v).c_str(),
                DirtyText(v).c_str(),
                PctText(r.read_hit_pct).c_str(), r.read_iops + r.write_iops, r.cleaner_mb_per_s,
                static_cast<unsigned long long>(v.Errors()));
}

std::string CapacityText(const FieldView& v) {
  return v.running() ? HumanBytes(v.Count("capacity_lines") * v.Count("line_size")) : "-";
}

std::string OccupancyText(const FieldView& v) {
  return v.running() ? Percent(v.Count("occupancy_lines"), v.Count("capacity_lines")) : "-";
}

std::string DirtyText(const FieldView& v) {
  return v.running() ? Percent(v.Count("dirty_lines"), v.Count("capacity_lines")) : "-";
}

std::string HitRatioText(const FieldView& v) {
  const uint64_t hits = v.Count("read_hits") + v.Count("write_hits");
  return v.running() ? Percent(hits, hits + v.Count("read_misses") + v.Count("write_misses")) : "-";
}

// One volume's figures out of a cache's stats (`stats --volume`): the
// cache's name and mode, then the volume's fields without their
// "volume.N." prefix. A cache of one volume has no such fields: its own
// figures are that volume's. kNotFound when there is no such volume.
cachecore::Result<Fields> VolumeView(const Fields& all, const std::string& cache, const std::string& volume) {
  auto value = [&](const std::string& key) {
    for (const auto& [k, v] : all) {
      if (k == key) return v;
    }
    return std::string();
  };
  Fields out{{"name", cache}, {"volume", volume}, {"mode", value("mode")}};
  for (size_t i = 0;; ++i) {
    const std::string prefix = "volume." + std::to_string(i) + ".";
    const std::string name = value(prefix + "name");
    if (name.empty()) break;
    if (name != volume) continue;
    for (const auto& [k, v] : all) {
      if (k.rfind(prefix, 0) == 0 && k != prefix + "name") out.push_back({k.substr(prefix.size()), v});
    }
    return out;
  }
  if (volume != cache || !value("volume.0.name").empty() || value("state") == "stopped") {
    return cachecore::Status::NotFound("cache '" + cache + "' has no volume '" + volume + "'" +
                            (value("state") == "stopped" ? " running (it is stopped)" : ""));
  }
  out.push_back({"state", "served"});
  out.push_back({"dm_device", value("dm_device")});
  out.push_back({"kernel_device", value("kernel_device")});
  out.push_back({"size_bytes", value("origin_bytes")});
  for (const char* key : {"occupancy_lines", "dirty_lines", "read_hits", "read_misses", "write_hits", "write_misses",
                          "read_requests", "write_requests", "read_bytes", "write_bytes", "read_hit_ratio",
                          "hit_ratio"}) {
    out.push_back({key, value(key)});
  }
  return out;
}

}  // namespace cachectl
