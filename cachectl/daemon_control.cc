#include "daemon_control.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>

#include "cache_checks.h"
#include "daemon_volumes.h"

namespace cachectl {

using namespace cachecore;

namespace {

PinTotals TotalsOf(const PinReport& r) { return {r.pinned_bytes, r.resident_bytes, r.limit_bytes}; }

// The report of `cachectl stats`, in the order the CLI prints it.
// A cache of several volumes: each one's figures, as volume.N.KEY (N from
// 0 in the engine's order; by number, as names may hold dots). None for a
// cache of one volume: the cache's figures are its volume's.
template <typename Kv, typename Num, typename Ratio>
void AddVolumeFields(Daemon& d, const Kv& kv, const Num& num, const Ratio& ratio) {
  const std::vector<VolumeInfo> volumes = d.engine->volumes();
  if (volumes.size() < 2) return;
  std::map<std::string, Daemon::ShownFrontEnd> shown;
  {
    std::lock_guard lock(d.shown_mu);
    shown = d.shown_volumes;
    shown[d.spec.name] = d.shown;
  }
  for (size_t i = 0; i < volumes.size(); ++i) {
    const VolumeInfo& v = volumes[i];
    const std::string p = "volume." + std::to_string(i) + ".";
    kv(p + "name", v.name);
    kv(p + "origin", v.origin_identity);
    kv(p + "state", v.removing ? "removing" : "served");
    kv(p + "dm_device", shown[v.name].dm_device);
    kv(p + "kernel_device", shown[v.name].kernel_device);
    num(p + "size_bytes", v.size);
    kv(p + "seq_cutoff", v.sequential_cutoff ? std::to_string(*v.sequential_cutoff) : "cache");
    num(p + "occupancy_lines", v.occupancy_lines);
    num(p + "dirty_lines", v.dirty_lines);
    num(p + "read_hits", v.read_hits);
    num(p + "read_misses", v.read_misses);
    num(p + "write_hits", v.write_hits);
    num(p + "write_misses", v.write_misses);
    num(p + "read_requests", v.read_requests);
    num(p + "write_requests", v.write_requests);
    num(p + "read_bytes", v.read_bytes);
    num(p + "write_bytes", v.write_bytes);
    ratio(p + "read_hit_ratio", v.read_hit_ratio());
    ratio(p + "hit_ratio", v.hit_ratio());
  }
}

StatsReply StatsOf(Daemon& d) {
  Engine& e = *d.engine;
  StatsSnapshot s = e.stats();
  StatsReply r;
  auto kv = [&](const std::string& k, const std::string& v) { r.fields.emplace_back(k, v); };
  auto num = [&](const std::string& k, uint64_t v) { kv(k, std::to_string(v)); };
  auto ratio = [&](const std::string& k, double v) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.4f", v);
    kv(k, b);
  };
  // metadata_failed first: it refuses writes, where failed passes them through.
  kv("state", s.metadata_failed ? "metadata_failed" : s.failed ? "failed" : "running");
  kv("mode", CacheModeName(e.mode()));
  kv("metadata_failed", s.metadata_failed ? "true" : "false");
  {
    std::lock_guard lock(d.shown_mu);
    kv("frontend", d.shown.frontend);
    kv("kernel_device", d.shown.kernel_device);
    kv("dm_device", d.shown.dm_device);
  }
  kv("encryption", d.spec.key.empty() ? "off" : "aes-256-xts");
  num("line_size", e.line_size());
  num("origin_bytes", e.identity().origin_size);
  num("cache_device_bytes", d.cache->size_bytes());
  // How this run began: a new cache, the snapshot its last clean shutdown
  // wrote, or its records (after a crash, or with no snapshot that fits).
  kv("started_from", d.spec.create ? "attach" : e.started_from_snapshot() ? "snapshot" : "records");
  EngineConfig now = e.settings();
  num("seq_cutoff", now.sequential_cutoff);
  num("dirty_target_pct", now.dirty_target_pct);
  num("dirty_high_pct", now.dirty_high_pct);
  num("dirty_low_pct", now.dirty_low_pct);
  num("cleaner_batch_lines", now.cleaner_batch_lines);
  num("nbd_max_connections", d.spec.nbd_connections);
  kv("nbd_tcp", d.spec.tcp_address);
  kv("nbd_tls", !d.spec.tls_psk.empty() ? "psk" : !d.spec.tls_cert.empty() ? "x509" : "");
  num("capacity_lines", s.capacity_lines);
  num("overprovisioned_bytes", e.overprovisioned_bytes());
  PlacementSettings p = e.placement();
  kv("placement_window", PlacementWindowText(p.window));
  num("placement_rate", p.rate_bytes_per_s);
  PinTotals pins = TotalsOf(e.pins());
  num("pinned_bytes", pins.pinned_bytes);
  num("pinned_resident_bytes", pins.resident_bytes);
  num("pin_limit_bytes", pins.limit_bytes);
  num("occupancy_lines", s.occupancy_lines);
  num("dirty_lines", s.dirty_lines);
  num("clean_lines", s.clean_lines);
  num("read_hits", s.read_hits);
  num("read_misses", s.read_misses);
  num("write_hits", s.write_hits);
  num("write_misses", s.write_misses);
  num("read_requests", s.read_requests);
  num("write_requests", s.write_requests);
  num("read_bytes", s.read_bytes);
  num("write_bytes", s.write_bytes);
  ratio("read_hit_ratio", s.read_hit_ratio());
  ratio("hit_ratio", s.hit_ratio());
  // The RAM tier: its size (0: off), what it holds, and the reads it
  // served (counted in read_hits too).
  num("ram_cache_bytes", s.ram_cache_bytes);
  num("ram_used_bytes", s.ram_used_bytes);
  num("ram_hits", s.ram_hits);
  ratio("ram_hit_ratio", s.ram_hit_ratio());
  num("promotions", s.promotions);
  num("bypassed", s.bypassed);
  num("bypassed_no_space", s.bypassed_no_space);
  num("evictions", s.evictions);
  num("cleaner_writes", s.cleaner_writes);
  num("cleaned_bytes", s.cleaned_blocks * 4096);  // the engine counts 4 KiB blocks
  // The cleaner's controller: what it does now, the bytes a second it
  // cleaned over its last second, the writes it slowed (dirty past high).
  kv("cleaner_state", s.cleaner_state);
  kv("policy", s.policy);
  num("writeback_rate", s.writeback_rate_bytes);
  num("throttled_writes", s.throttled_writes);
  // requests.KIND: FUA writes and flushes as the front ends received them.
  num("requests.fua_writes", d.backend->fua_writes());
  num("requests.flushes", d.backend->flushes());
  // requests.in_flight: taken by the engine and not yet answered; the peak
  // since start or reset shows the depth the front end reaches.
  num("requests.in_flight", s.requests_in_flight);
  num("requests.peak_in_flight", s.peak_requests_in_flight);
  const ErrorCounts& err = s.errors;
  // errors.DEVICE.KIND: the CLI nests them into objects.
  num("errors.cache.read", err.cache_read);
  num("errors.cache.write", err.cache_write);
  num("errors.cache.flush", err.cache_flush);
  num("errors.cache.checksum_repaired", err.checksum_repaired);
  num("errors.cache.checksum_failed", err.checksum_failed);
  num("errors.origin.read", err.origin_read);
  num("errors.origin.write", err.origin_write);
  num("errors.origin.flush", err.origin_flush);
  num("errors.metadata.write", err.metadata);
  AddVolumeFields(d, kv, num, ratio);
  return r;
}

// Everything of a set but the mode, each over the value in force now.
// Every check comes first (the cleaner's, the RAM tier's size), and the RAM
// tier is sized before the rest: the memory refusing it is the one failure
// that cannot be told in advance, and then nothing has changed.
Status ApplyTunables(Engine& e, const SetRequest& r) {
  const bool cleaner = r.dirty_target_pct || r.dirty_high_pct || r.dirty_low_pct || r.cleaner_batch_lines;
  const EngineConfig now = e.settings();
  const Engine::CleanerSettings wanted{r.dirty_target_pct.value_or(now.dirty_target_pct),
                                       r.dirty_high_pct.value_or(now.dirty_high_pct),
                                       r.dirty_low_pct.value_or(now.dirty_low_pct),
                                       r.cleaner_batch_lines.value_or(now.cleaner_batch_lines)};
  if (cleaner) CACHECORE_RETURN_IF_ERROR(Engine::CheckCleaner(wanted));
  if (r.ram_cache_bytes) {
    const uint64_t bytes = *r.ram_cache_bytes;  // a client other than ours may send any
    CACHECORE_RETURN_IF_ERROR(Engine::CheckRamCache(bytes));
    CACHECORE_RETURN_IF_ERROR(CheckRamCacheFits(bytes));
    CACHECORE_RETURN_IF_ERROR(e.SetRamCache(bytes));
  }
  if (cleaner) CACHECORE_RETURN_IF_ERROR(e.SetCleaner(wanted));
  if (r.seq_cutoff_bytes) CACHECORE_RETURN_IF_ERROR(e.SetSequentialCutoff(*r.seq_cutoff_bytes));
  if (r.placement_window || r.placement_rate_bytes) {
    PlacementSettings p = e.placement();
    if (r.placement_window) p.window = *r.placement_window;
    if (r.placement_rate_bytes) p.rate_bytes_per_s = *r.placement_rate_bytes;
    CACHECORE_RETURN_IF_ERROR(e.SetPlacement(p));
  }
  return Status::Ok();
}

}  // namespace

template <typename Fn>
auto DaemonControl::WithEngine(Fn fn) -> decltype(fn(std::declval<Engine&>())) {
  std::shared_lock lock(d_.engine_mu);
  if (!d_.engine) return Status::Busy("the cache is shutting down");
  return fn(*d_.engine);
}

namespace {
// The fields a `stats --reset` zeroes (LiveStats::ResetCounters and the
// backend's counters).
bool IsResetCounter(const std::string& key) {
  static const std::set<std::string> kCounters = {
      "read_hits",      "read_misses",       "write_hits",     "write_misses",   "read_requests",
      "write_requests", "read_bytes",        "write_bytes",    "promotions",     "evictions",
      "bypassed",       "bypassed_no_space", "cleaner_writes", "cleaned_bytes",  "throttled_writes",
      "requests.fua_writes", "requests.flushes"};
  return kCounters.count(key) > 0 || key.rfind("errors.", 0) == 0;
}
}  // namespace

// A reset adds what it zeroes to reset_base, under counters_mu from the
// report to the reset, so that StatsSinceStart never sees the counters
// between the two.
Result<StatsReply> DaemonControl::Stats(bool reset) {
  return WithEngine([&](Engine& e) -> Result<StatsReply> {
    std::unique_lock lock(d_.counters_mu, std::defer_lock);
    if (reset) lock.lock();
    StatsReply r = StatsOf(d_);
    if (reset) {
      for (const auto& [key, value] : r.fields) {
        if (IsResetCounter(key)) d_.reset_base[key] += std::strtoull(value.c_str(), nullptr, 10);
      }
      e.ResetStats();
      d_.backend->ResetCounters();
    }
    return r;
  });
}

Result<StatsReply> DaemonControl::StatsSinceStart() {
  return WithEngine([&](Engine&) -> Result<StatsReply> {
    std::lock_guard lock(d_.counters_mu);
    StatsReply r = StatsOf(d_);
    for (auto& [key, value] : r.fields) {
      auto base = d_.reset_base.find(key);
      if (base != d_.reset_base.end()) value = std::to_string(std::strtoull(value.c_str(), nullptr, 10) + base->second);
    }
    return r;
  });
}

namespace {
// The client's progress, and a log line at every tenth of the way (the
// journal shows how a long flush goes), and at its end.
ProgressSink Logged(const std::string& what, const ProgressSink& progress) {
  auto last = std::make_shared<int>(-1);
  return [what, progress, last](uint64_t left, uint64_t total) {
    if (progress) progress(left, total);
    const int tenth = total == 0 ? 10 : static_cast<int>(10 * (total - left) / total);
    if (tenth == *last) return;
    *last = tenth;
    Log("info", what + ": " + std::to_string(tenth * 10) + " %, " + std::to_string(left) + " dirty lines left");
  };
}

Status LoggedOutcome(const std::string& what, Status s) {
  Log(s.ok() ? "info" : "error", what + (s.ok() ? ": done" : ": " + s.ToString()));
  return s;
}
}  // namespace

Status DaemonControl::Flush(const ProgressSink& progress) {
  return WithEngine([&](Engine& e) { return LoggedOutcome("flush", e.Flush(Logged("flush", progress))); });
}

// The flush runs while the cache still serves; the stop takes the engine
// away, so it runs after the shared lock is let go.
Status DaemonControl::Detach(bool wipe, const ProgressSink& progress) {
  CACHECORE_RETURN_IF_ERROR(WithEngine([&](Engine& e) {
    return LoggedOutcome("detach: flush", e.Flush(Logged("detach: flush", progress)));
  }));
  return StopDaemon(d_, true, wipe);
}

Status DaemonControl::Stop() {
  CACHECORE_RETURN_IF_ERROR(WithEngine([](Engine&) { return Status::Ok(); }));
  return StopDaemon(d_, false, false);
}

// A set with a mode holds mode_mu from start to end, so two of them run
// one after the other, whole. The other settings are applied under
// settings_mu alone, and the mode switch (which may clean for minutes)
// runs after it is let go: a set without a mode never waits for cleaning,
// and whenever it runs, the outcome is that of some serial order of sets.
// Lock order: mode_mu, then settings_mu.
namespace {

// A range of volume `volume` ("": the cache's first) at its line-space
// offset: kNotFound for no such volume, kOutOfRange past its end.
Result<uint64_t> InLineSpace(Engine& e, const ByteRange& range, const std::string& volume) {
  const std::vector<VolumeInfo> volumes = e.volumes();
  auto v = volume.empty() ? volumes.begin()
                          : std::find_if(volumes.begin(), volumes.end(), [&](const VolumeInfo& x) { return x.name == volume; });
  if (v == volumes.end()) return Status::NotFound("the cache has no volume named " + volume);
  if (range.offset > v->size || range.length > v->size - range.offset) {
    return Status::OutOfRange("the range ends beyond the volume (" + v->name + ", " + std::to_string(v->size) +
                              " bytes)");
  }
  return v->base + range.offset;
}

}  // namespace

Status DaemonControl::Set(const SetRequest& request, const ProgressSink& progress) {
  CACHECORE_RETURN_IF_ERROR(CheckVolumeSet(request));
  if (!request.volume.empty()) {
    return WithEngine([&](Engine& e) {
      std::optional<uint64_t> cutoff;
      if (!request.seq_cutoff_of_cache) cutoff = request.seq_cutoff_bytes;
      return e.SetVolumeCutoff(request.volume, cutoff);
    });
  }
  return WithEngine([&](Engine& e) {
    std::unique_lock<std::mutex> mode;
    if (request.mode) mode = std::unique_lock(d_.mode_mu);
    {
      std::lock_guard settings(d_.settings_mu);
      CACHECORE_RETURN_IF_ERROR(ApplyTunables(e, request));
    }
    if (!request.mode) return Status::Ok();
    Log("info", std::string("mode -> ") + CacheModeName(*request.mode));
    return LoggedOutcome(std::string("mode -> ") + CacheModeName(*request.mode),
                         e.SetMode(*request.mode, Logged("mode switch: flush", progress)));
  });
}

Result<PinTotals> DaemonControl::Pin(const ByteRange& range, const std::string& volume) {
  return WithEngine([&](Engine& e) -> Result<PinTotals> {
    Result<uint64_t> at = InLineSpace(e, range, volume);
    if (!at.ok()) return at.status();
    CACHECORE_RETURN_IF_ERROR(e.Pin(at.value(), range.length));
    return TotalsOf(e.pins());  // what is pinned now, for the answer
  });
}

Result<PinTotals> DaemonControl::Unpin(const ByteRange& range, const std::string& volume) {
  return WithEngine([&](Engine& e) -> Result<PinTotals> {
    Result<uint64_t> at = InLineSpace(e, range, volume);
    if (!at.ok()) return at.status();
    CACHECORE_RETURN_IF_ERROR(e.Unpin(at.value(), range.length));
    return TotalsOf(e.pins());
  });
}

Result<PinsReply> DaemonControl::Pins() {
  return WithEngine([](Engine& e) -> Result<PinsReply> {
    PinReport r = e.pins();
    PinsReply reply{TotalsOf(r), r.ranges, {}};
    const std::vector<VolumeInfo> volumes = e.volumes();
    for (PinnedRange& p : reply.ranges) {  // each in its volume's own bytes
      auto v = std::find_if(volumes.begin(), volumes.end(),
                            [&](const VolumeInfo& x) { return p.offset >= x.base && p.offset < x.base + x.size; });
      const bool first = v == volumes.end() || v == volumes.begin();
      if (v != volumes.end()) p.offset -= v->base;
      reply.volumes.push_back(first ? "" : v->name);
    }
    return reply;
  });
}

Result<HistoryReply> DaemonControl::History() {
  return WithEngine([&](Engine& e) -> Result<HistoryReply> { return HistoryReply{e.line_size(), d_.history.Minutes()}; });
}

Status DaemonControl::AddVolume(const std::string& volume, const std::string& origin) {
  return WithEngine([&](Engine& e) { return cachectl::AddVolume(d_, e, volume, origin); });
}

Status DaemonControl::RemoveVolume(const std::string& volume, const ProgressSink& progress) {
  return WithEngine([&](Engine& e) { return cachectl::RemoveVolume(d_, e, volume, progress); });
}

Result<MovementReply> DaemonControl::Movement() {
  return WithEngine([](Engine& e) -> Result<MovementReply> {
    MovementReport m = e.movement();
    return MovementReply{e.placement(), m.region_bytes, m.hours, m.hottest};
  });
}

}  // namespace cachectl
