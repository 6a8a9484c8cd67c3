// cachectl rebuild NAME [--force]: replaces a damaged (or unwanted) cache by
// a new, cold one over the same origin and cache device, with the same line
// size, and starts it. Safe by default: it refuses while the cache may hold
// data the origin lacks, unless --force, which names the ranges that keep
// the origin's older data.
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>

#include "cachecore/engine/cache_mode.h"
#include "cli_common.h"
#include "commands.h"
#include "control.h"
#include "daemon.h"
#include "damage_cli.h"

namespace cachectl {

namespace po = boost::program_options;
using namespace cachecore;

namespace {

// The mode the old store recorded, when it still reads; else write-through.
CacheMode OldModeOr(const Dirs& dirs, const std::string& name, CacheMode fallback) {
  MetadataOptions mo;
  mo.read_only = true;
  auto store = MetadataStore::Open(dirs.Metadata(name), mo);
  if (!store.ok()) return fallback;
  Result<std::string> text = store.value()->GetConfig("mode");
  Result<CacheMode> mode = text.ok() ? ParseCacheMode(text.value()) : Result<CacheMode>(text.status());
  return mode.ok() ? mode.value() : fallback;
}

}  // namespace

int RunRebuild(const std::vector<std::string>& args) {
  std::string name, mode_text;
  CommonOptions common;
  po::options_description desc = common.Describe(
      "cachectl rebuild NAME [--mode MODE] [--force]\n\n"
      "Replaces a stopped cache by a new, cold one over the same devices and starts it:\n"
      "after damage to its superblock or metadata ('cachectl check NAME' tells). Refuses\n"
      "while the old cache may hold data the origin lacks, unless --force.\n\n"
      "example: cachectl check data; cachectl rebuild data");
  desc.add_options()
      ("name", po::value(&name)->required(), "cache name")
      ("mode", po::value(&mode_text), "mode of the new cache (default: the old one's, else writethrough)")
      ("force", "rebuild even though origin ranges may be stale (they keep the origin's older data)");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "rebuild", "name"); rc >= 0) return rc;
  Result<CacheMode> mode = mode_text.empty() ? Result<CacheMode>(CacheMode::kWriteThrough)
                                             : ParseCacheMode(mode_text);
  if (!mode.ok()) return Fail(kExitUsage, "rebuild: " + mode.status().message());
  if (int rc = common.RequireRoot("rebuild"); rc != 0) return rc;
  Dirs dirs = common.dirs();
  Result<CacheConfig> config = LoadConfig(dirs.ConfigFile(name));
  if (!config.ok()) return Fail(kExitNotFound, "rebuild: no cache named '" + name + "'");
  if (SendControl(dirs.ControlSocket(name), StatsRequest{}).ok()) {
    return Fail(kExitRefused, "rebuild: cache '" + name + "' is running; stop it first");
  }
  if (!config.value()["online_volume"].empty()) {
    return Fail(kExitRefused, "rebuild: '" + name + "' caches the online volume /dev/mapper/" +
                config.value()["online_volume"] + "; rebuild works on caches attached offline");
  }
  Result<DamageReport> damage = AssessNamedCache(dirs, name, config.value());
  if (!damage.ok()) return Fail(ExitCodeOf(damage.status()), "rebuild: " + damage.status().message());
  if (damage->dirty != DamageReport::Dirty::kNone && !vm.count("force")) {
    if (!PlannedSuperblockRepair(dirs, name, config.value()).empty()) {
      return Fail(kExitRefused, "rebuild: only the superblock of '" + name + "' is damaged, and the cache "
                  "holds dirty data: 'cachectl start " + name + "' rewrites the superblock from the metadata "
                  "store and keeps it (--force rebuilds anyway, dropping it)");
    }
    return Fail(kExitRefused, "rebuild: " + DescribeDirty(damage.value()) +
                "; 'cachectl check " + name + "' lists them; --force rebuilds anyway");
  }
  Result<DaemonSpec> from_config = SpecFromConfig(dirs, name, config.value());
  if (!from_config.ok()) return Fail(kExitRefused, "rebuild: " + from_config.status().message());
  DaemonSpec& spec = from_config.value();
  spec.create = true;
  spec.replace = Replace::kDamagedCache;  // assessed above
  spec.engine.mode = mode_text.empty() ? OldModeOr(dirs, name, CacheMode::kWriteThrough) : mode.value();
  for (auto [at, len] : damage->stale) {
    std::printf("keeps the origin's older data: bytes %llu..%llu\n", (unsigned long long)at,
                (unsigned long long)(at + len));
  }
  // An encrypted cache is rebuilt with its key: read now, before the old
  // store goes.
  if (!spec.key.empty()) {
    Result<std::shared_ptr<const CacheKey>> key = LoadCacheKey(spec.key);
    if (!key.ok()) return Fail(ExitCodeOf(key.status()), "rebuild: " + key.status().message());
  }
  std::error_code ec;
  std::filesystem::remove_all(dirs.Metadata(name), ec);
  Status s = LaunchDaemon(spec);
  if (!s.ok()) return Fail(ExitCodeOf(s), "rebuild: " + s.message());
  std::printf("rebuilt %s: a new, cold %s cache of %s over %s\n", name.c_str(),
              CacheModeName(spec.engine.mode), spec.cache.c_str(), spec.origin.c_str());
  return 0;
}

}  // namespace cachectl
