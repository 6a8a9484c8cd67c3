// cachectl check NAME: verifies a stopped cache offline, writing nothing.
#include <boost/program_options.hpp>
#include <cstdio>

#include "cachecore/devices/file_device.h"
#include "cachecore/devices/open_device.h"
#include "cachecore/metadata/check.h"
#include "cache_key_source.h"
#include "cli_common.h"
#include "damage_cli.h"
#include "commands.h"
#include "control.h"

namespace cachectl {

namespace po = boost::program_options;
using namespace cachecore;

int RunCheck(const std::vector<std::string>& args) {
  std::string name;
  CommonOptions common;
  po::options_description desc = common.Describe(
      "cachectl check NAME\n\nVerifies a stopped cache without writing: superblock, metadata, and the\n"
      "checksum of every cached block. Exit 0 when all is well, 1 when it found problems.\n"
      "A damaged superblock or metadata store is reported with the origin ranges that may be\n"
      "stale, or that the origin holds everything (then 'cachectl rebuild NAME' is safe).\n\n"
      "example: cachectl stop data && cachectl check data");
  desc.add_options()("name", po::value(&name)->required(), "cache name");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "check", "name"); rc >= 0) return rc;
  Dirs dirs = common.dirs();
  Result<CacheConfig> config = LoadConfig(dirs.ConfigFile(name));
  if (!config.ok()) return Fail(kExitNotFound, "check: no cache named '" + name + "'");
  if (SendControl(dirs.ControlSocket(name), StatsRequest{}).ok()) {
    return Fail(kExitRefused, "check: cache '" + name + "' is running; stop it first");
  }
  FileDeviceOptions ro;
  ro.read_only = true;
  auto origin = OpenOriginDevice(config.value()["origin"], /*read_only=*/true);
  if (!origin.ok()) return Fail(ExitCodeOf(origin.status()), "check: " + origin.status().message());
  auto cache = OpenFileDevice(config.value()["cache"], ro);
  if (!cache.ok()) return Fail(ExitCodeOf(cache.status()), "check: " + cache.status().message());
  MetadataOptions mo;
  mo.read_only = true;
  auto store = MetadataStore::Open(dirs.Metadata(name), mo);
  // An encrypted cache's blocks are checked with its key, read as a start reads it.
  const KeySource source{config.value()["key_file"], config.value()["key_keyring"]};
  std::shared_ptr<const CacheKey> key;
  if (!source.empty()) {
    Result<std::shared_ptr<const CacheKey>> loaded = LoadCacheKey(source);
    if (!loaded.ok()) return Fail(ExitCodeOf(loaded.status()), "check: " + loaded.status().message());
    key = loaded.value();
  }
  Result<CheckReport> r = store.ok() ? CheckCache(origin->get(), cache->get(), store->get(), key)
                                     : Result<CheckReport>(store.status());
  if (!r.ok()) {
    // The superblock or the store is damaged or gone: say what still can be.
    DamageReport damage = AssessDamage(cache->get(), store.ok() ? store->get() : nullptr,
                                       store.ok() ? "" : store.status().message());
    std::string repair = PlannedSuperblockRepair(dirs, name, config.value());
    PrintDamage(damage, name, repair);
    std::fflush(stdout);
    return Fail(kExitFailed, "check: cache '" + name + "' is damaged: " +
                                    (repair.empty() ? DescribeDirty(damage)
                                                    : "its superblock fails its checksum; 'cachectl start " +
                                                          name + "' repairs it from the metadata store"));
  }
  const CheckReport& c = r.value();
  std::printf("cache %s (%s)\n", name.c_str(), c.uuid.c_str());
  std::printf("  last shutdown   %s\n", c.clean_shutdown ? "clean" : "not clean (a crash, or running)");
  std::printf("  lines           %llu, %llu dirty\n", (unsigned long long)c.lines,
              (unsigned long long)c.dirty_lines);
  std::printf("  blocks          %llu verified, %llu clean bad (repaired from the origin on read), "
              "%llu dirty bad, %llu settled at next start\n",
              (unsigned long long)c.blocks_verified, (unsigned long long)c.clean_blocks_bad,
              (unsigned long long)c.dirty_blocks_bad, (unsigned long long)c.unsettled_blocks);
  for (const auto& [at, len] : c.lost_ranges) {
    std::printf("  stale on the origin: bytes %llu..%llu\n", (unsigned long long)at,
                (unsigned long long)(at + len));
  }
  for (const std::string& p : c.problems) std::printf("  PROBLEM: %s\n", p.c_str());
  if (c.problems.empty()) {
    std::printf("ok\n");
    return kExitOk;
  }
  std::fflush(stdout);
  return Fail(kExitFailed, "check: cache '" + name + "' has " + std::to_string(c.problems.size()) +
                                  " problem(s), listed above");
}

}  // namespace cachectl
