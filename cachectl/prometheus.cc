#include "prometheus.h"

#include <cstdio>
#include <cstdlib>
#include <map>

namespace cachectl {

namespace {

enum class Kind { kCounter, kGauge };

// A metric family: its name, kind and help, and where its samples come
// from: a stats field, and for families with more labels, one field per
// label value. `scale` turns a percentage into a ratio.
struct Family {
  const char* name;
  Kind kind;
  const char* help;
  const char* field;  // null: `labelled` gives the fields
  double scale = 1;
  const char* label = nullptr;                                      // the extra label's name
  std::vector<std::pair<const char*, const char*>> labelled = {};  // label value, field
  // A sample per volume of a cache of several (a `volume` label): the
  // fields are volume.N.FIELD (none for a cache of one volume).
  bool per_volume = false;
};

const std::vector<Family>& Families() {
  static const std::vector<Family> kFamilies = {
      {"cachectl_up", Kind::kGauge, "1 when the cache's daemon runs and answers", nullptr},
      {"cachectl_metadata_failed", Kind::kGauge, "1 when a metadata write failed (writes are refused)", nullptr},
      {"cachectl_line_size_bytes", Kind::kGauge, "The cache line", "line_size"},
      {"cachectl_origin_size_bytes", Kind::kGauge, "The origin's size", "origin_bytes"},
      {"cachectl_cache_device_size_bytes", Kind::kGauge, "The cache device's size", "cache_device_bytes"},
      {"cachectl_capacity_lines", Kind::kGauge, "Lines the cache holds", "capacity_lines"},
      {"cachectl_occupied_lines", Kind::kGauge, "Lines holding data", "occupancy_lines"},
      {"cachectl_dirty_lines", Kind::kGauge, "Lines holding data the origin lacks", "dirty_lines"},
      {"cachectl_clean_lines", Kind::kGauge, "Lines holding data the origin has too", "clean_lines"},
      {"cachectl_overprovisioned_bytes", Kind::kGauge, "Cache device bytes left unused", "overprovisioned_bytes"},
      {"cachectl_pinned_bytes", Kind::kGauge, "Pinned ranges of the volume", "pinned_bytes"},
      {"cachectl_pinned_resident_bytes", Kind::kGauge, "Pinned bytes in the cache now", "pinned_resident_bytes"},
      {"cachectl_pin_limit_bytes", Kind::kGauge, "The most that may be pinned", "pin_limit_bytes"},
      {"cachectl_read_hit_ratio", Kind::kGauge, "Read hits over blocks read, since start or reset", "read_hit_ratio"},
      {"cachectl_hit_ratio", Kind::kGauge, "Hits over blocks read and written, since start or reset", "hit_ratio"},
      {"cachectl_ram_hit_ratio", Kind::kGauge, "Blocks read from the RAM tier over blocks read, since start or reset",
       "ram_hit_ratio"},
      {"cachectl_ram_cache_bytes", Kind::kGauge, "The RAM tier's size (0: off)", "ram_cache_bytes"},
      {"cachectl_ram_used_bytes", Kind::kGauge, "Bytes of blocks the RAM tier holds", "ram_used_bytes"},
      {"cachectl_dirty_target_ratio", Kind::kGauge, "The cleaner's target share of dirty lines", "dirty_target_pct",
       0.01},
      {"cachectl_dirty_low_ratio", Kind::kGauge, "Past this share of dirty lines the cleaner runs flat out",
       "dirty_low_pct", 0.01},
      {"cachectl_dirty_high_ratio", Kind::kGauge, "Past this share of dirty lines writes are slowed",
       "dirty_high_pct", 0.01},
      {"cachectl_sequential_cutoff_bytes", Kind::kGauge, "Streams past this bypass the cache (0: off)", "seq_cutoff"},
      {"cachectl_writeback_rate_bytes_per_second", Kind::kGauge, "What the cleaner cleaned over its last second",
       "writeback_rate"},
      {"cachectl_requests_in_flight", Kind::kGauge, "Requests taken by the engine, not yet answered",
       "requests.in_flight"},
      {"cachectl_nbd_max_connections", Kind::kGauge, "NBD clients served at once", "nbd_max_connections"},
      {"cachectl_read_requests_total", Kind::kCounter, "Reads the front ends handed to the cache", "read_requests"},
      {"cachectl_write_requests_total", Kind::kCounter, "Writes the front ends handed to the cache",
       "write_requests"},
      {"cachectl_read_bytes_total", Kind::kCounter, "Bytes those reads asked for", "read_bytes"},
      {"cachectl_written_bytes_total", Kind::kCounter, "Bytes those writes carried", "write_bytes"},
      {"cachectl_blocks_total", Kind::kCounter, "4 KiB blocks read and written, by result", nullptr, 1, "result",
       {{"read_hit", "read_hits"}, {"read_miss", "read_misses"}, {"write_hit", "write_hits"},
        {"write_miss", "write_misses"}}},
      {"cachectl_ram_hits_total", Kind::kCounter, "4 KiB blocks read from the RAM tier (read hits too)", "ram_hits"},
      {"cachectl_promoted_lines_total", Kind::kCounter, "Lines brought into the cache", "promotions"},
      {"cachectl_evicted_lines_total", Kind::kCounter, "Lines the policy let go", "evictions"},
      {"cachectl_bypassed_requests_total", Kind::kCounter, "Requests past the sequential cutoff", "bypassed"},
      {"cachectl_bypassed_no_space_lines_total", Kind::kCounter,
       "Lines that went around the cache for want of a clean or free line", "bypassed_no_space"},
      {"cachectl_cleaner_writes_total", Kind::kCounter, "The cleaner's writes to the origin", "cleaner_writes"},
      {"cachectl_cleaned_bytes_total", Kind::kCounter, "Bytes the cleaner wrote to the origin", "cleaned_bytes"},
      {"cachectl_throttled_writes_total", Kind::kCounter, "Write-back writes slowed past the high watermark",
       "throttled_writes"},
      {"cachectl_fua_writes_total", Kind::kCounter, "FUA writes the front ends handed over", "requests.fua_writes"},
      {"cachectl_flushes_total", Kind::kCounter, "Flushes the front ends handed over", "requests.flushes"},
      {"cachectl_errors_total", Kind::kCounter, "Failed operations, by device and operation", nullptr, 1, "error",
       {{"cache_read", "errors.cache.read"}, {"cache_write", "errors.cache.write"},
        {"cache_flush", "errors.cache.flush"}, {"cache_checksum_repaired", "errors.cache.checksum_repaired"},
        {"cache_checksum_failed", "errors.cache.checksum_failed"}, {"origin_read", "errors.origin.read"},
        {"origin_write", "errors.origin.write"}, {"origin_flush", "errors.origin.flush"},
        {"metadata_write", "errors.metadata.write"}}},
      {"cachectl_volume_occupied_lines", Kind::kGauge, "Lines holding a volume's data", "occupancy_lines", 1, nullptr,
       {}, true},
      {"cachectl_volume_dirty_lines", Kind::kGauge, "Lines holding a volume's data its origin lacks", "dirty_lines", 1,
       nullptr, {}, true},
      {"cachectl_volume_read_requests_total", Kind::kCounter, "Reads of a volume", "read_requests", 1, nullptr, {},
       true},
      {"cachectl_volume_write_requests_total", Kind::kCounter, "Writes to a volume", "write_requests", 1, nullptr, {},
       true},
      {"cachectl_volume_blocks_total", Kind::kCounter, "4 KiB blocks of a volume read and written, by result", nullptr,
       1, "result",
       {{"read_hit", "read_hits"}, {"read_miss", "read_misses"}, {"write_hit", "write_hits"},
        {"write_miss", "write_misses"}},
       true},
  };
  return kFamilies;
}

// A label value as the format escapes it: backslash, quote, newline.
std::string Escaped(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string Number(const std::string& text, double scale) {
  if (scale == 1) return text;  // integers and ratios exactly as the daemon sent them
  char b[32];
  std::snprintf(b, sizeof(b), "%.4g", std::strtod(text.c_str(), nullptr) * scale);
  return b;
}

void Sample(std::string& out, const char* name, const std::map<std::string, std::string>& f,
            const std::string& extra_label, const std::string& value) {
  auto text = [&](const char* k) {
    auto it = f.find(k);
    return it == f.end() ? std::string() : it->second;
  };
  out += std::string(name) + "{cache=\"" + Escaped(text("name")) + "\",mode=\"" + Escaped(text("mode")) + "\"" +
         extra_label + "} " + value + "\n";
}

// A per-volume family's samples: volume.0.*, volume.1.*, ... while there are.
void VolumeSamples(std::string& out, const Family& family, const std::map<std::string, std::string>& f) {
  for (size_t i = 0;; ++i) {
    const std::string p = "volume." + std::to_string(i) + ".";
    auto name = f.find(p + "name");
    if (name == f.end()) return;
    const std::string label = ",volume=\"" + Escaped(name->second) + "\"";
    if (family.field != nullptr) {
      if (auto v = f.find(p + family.field); v != f.end()) Sample(out, family.name, f, label, v->second);
      continue;
    }
    for (const auto& [value, field] : family.labelled) {
      if (auto v = f.find(p + field); v != f.end()) {
        Sample(out, family.name, f, label + "," + family.label + "=\"" + value + "\"", v->second);
      }
    }
  }
}

}  // namespace

std::string PrometheusText(const std::vector<Fields>& caches) {
  std::vector<std::map<std::string, std::string>> maps;
  for (const Fields& f : caches) maps.emplace_back(f.begin(), f.end());
  std::string out;
  for (const Family& family : Families()) {
    std::string samples;
    for (const auto& f : maps) {
      auto has = [&](const char* k) { return f.count(k) > 0 && !f.at(k).empty(); };
      const bool running = has("mode");  // a stopped cache's fields have no mode
      const std::string name = family.name;
      if (name == "cachectl_up") {
        Sample(samples, family.name, f, "", running ? "1" : "0");
      } else if (!running) {
        continue;
      } else if (name == "cachectl_metadata_failed") {
        Sample(samples, family.name, f, "", has("metadata_failed") && f.at("metadata_failed") == "true" ? "1" : "0");
      } else if (family.per_volume) {
        VolumeSamples(samples, family, f);
      } else if (family.field != nullptr) {
        if (has(family.field)) Sample(samples, family.name, f, "", Number(f.at(family.field), family.scale));
      } else {
        for (const auto& [value, field] : family.labelled) {
          if (has(field)) {
            Sample(samples, family.name, f, "," + std::string(family.label) + "=\"" + value + "\"", f.at(field));
          }
        }
      }
    }
    if (samples.empty()) continue;
    out += std::string("# HELP ") + family.name + " " + family.help + "\n";
    out += std::string("# TYPE ") + family.name + (family.kind == Kind::kCounter ? " counter\n" : " gauge\n");
    out += samples;
  }
  return out;
}

std::vector<std::string> PrometheusMetricNames() {
  std::vector<std::string> names;
  for (const Family& family : Families()) names.push_back(family.name);
  return names;
}

}  // namespace cachectl
