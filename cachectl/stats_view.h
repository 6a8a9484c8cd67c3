// The human views of a cache's statistics: `stats NAME` (sections with
// units and percentages), `stats --watch` (the rates of each interval, as
// iostat prints them), `top` (a row a cache) and `list`'s columns. Pure
// functions of the fields `stats` gathers (the daemon's, then the saved
// configuration's), so tests check their figures without a daemon.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "protocol.h"

namespace cachectl {

// The version of `stats --json` and `--csv`: raised when a field is
// renamed, removed or changes its unit; adding one keeps it.
inline constexpr int kStatsSchemaVersion = 2;

// "1.5 GiB": bytes in binary units with one decimal.
std::string HumanBytes(uint64_t bytes);
// "66.7 %" for part/whole, or "-" when whole is 0.
std::string Percent(uint64_t part, uint64_t whole);

// The fields by key. A key that is absent, or not a number, reads as "" or 0.
class FieldView {
 public:
  explicit FieldView(const Fields& fields);
  const std::string& Text(const std::string& key) const;
  uint64_t Count(const std::string& key) const;
  // Whether the fields are a daemon's (not a stopped cache's, nor one
  // whose daemon refused to answer).
  bool running() const { return Text("state") != "stopped" && Text("state") != "refused"; }
  // The sum of every errors.* field.
  uint64_t Errors() const;

 private:
  std::map<std::string, std::string> values_;
};

// One volume's figures out of a cache's stats (`stats --volume`): the
// cache's name and mode, then the volume's fields without their
// "volume.N." prefix (for a cache of one volume, its own figures).
// kNotFound when there is no such volume.
cachecore::Result<Fields> VolumeView(const Fields& all, const std::string& cache, const std::string& volume);

// `stats NAME`: the cache, usage, requests, errors and settings, each
// number with its unit.
std::string HumanStats(const Fields& fields);

// What happened between two samples of one cache `seconds` apart. A
// counter that went down was reset in between: its value is the
// interval's; so is every counter's when the sampler resets them at each
// sample (`stats --watch --reset`). All zero unless the cache ran at both.
struct IntervalRates {
  double read_iops = 0, write_iops = 0;
  double read_mb_per_s = 0, write_mb_per_s = 0;  // MB = 10^6 bytes, as iostat's
  std::optional<double> read_hit_pct, hit_pct;  // none without a block accessed
  double promotions_per_s = 0, evictions_per_s = 0;
  uint64_t dirty_bytes = 0;
  double dirty_mb_per_s = 0;  // the dirty data's growth (negative: it shrank)
  double cleaner_mb_per_s = 0;
};
IntervalRates RatesBetween(const Fields& before, const Fields& after, double seconds,
                           bool reset_at_each_sample = false);

// `stats --watch`: a header, then a row an interval ending at `clock`.
std::string WatchHeader();
std::string WatchRow(const std::string& clock, const IntervalRates& r);

// `top`: a header, then a row a cache (its rates over the last interval;
// a stopped cache shows its state only).
std::string TopHeader();
std::string TopRow(const Fields& after, const IntervalRates& r);

// `list`'s and `top`'s columns: the capacity in bytes, occupied and dirty
// lines and the hit ratio (since start) as percentages; "-" for a cache
// that does not run.
std::string CapacityText(const FieldView& v);
std::string OccupancyText(const FieldView& v);
std::string DirtyText(const FieldView& v);
std::string HitRatioText(const FieldView& v);

}  // namespace cachectl
