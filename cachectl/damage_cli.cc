#include "damage_cli.h"

#include <cstdio>
#include <cstdlib>

#include "cachecore/devices/file_device.h"
#include "cachecore/devices/open_device.h"
#include "cachecore/metadata/superblock.h"

namespace cachectl {

using namespace cachecore;

Result<DamageReport> AssessNamedCache(const Dirs& dirs, const std::string& name, CacheConfig& config) {
  FileDeviceOptions ro;
  ro.read_only = true;
  auto cache = OpenFileDevice(config["cache"], ro);
  if (!cache.ok()) return cache.status();
  MetadataOptions mo;
  mo.read_only = true;
  auto store = MetadataStore::Open(dirs.Metadata(name), mo);
  return AssessDamage(cache->get(), store.ok() ? store->get() : nullptr,
                      store.ok() ? "" : store.status().message());
}

std::string PlannedSuperblockRepair(const Dirs& dirs, const std::string& name, CacheConfig& config) {
  FileDeviceOptions ro;
  ro.read_only = true;
  auto origin = OpenOriginDevice(config["origin"], /*read_only=*/true);
  auto cache = OpenFileDevice(config["cache"], ro);
  MetadataOptions mo;
  mo.read_only = true;
  auto store = MetadataStore::Open(dirs.Metadata(name), mo);
  if (!origin.ok() || !cache.ok() || !store.ok()) return "";
  uint32_t line_size = static_cast<uint32_t>(std::strtoul(config["line_size"].c_str(), nullptr, 10));
  auto plan = PlanSuperblockRepair(cache->get(), origin->get(), store->get(), line_size);
  return plan.ok() && plan->has_value() ? plan->value().message : "";
}

std::string DescribeDirty(const DamageReport& r) {
  uint64_t bytes = 0;
  for (auto [at, len] : r.stale) bytes += len;
  switch (r.dirty) {
    case DamageReport::Dirty::kNone:
      return "the origin holds all the data (known from " + r.dirty_source + ")";
    case DamageReport::Dirty::kSome:
      return std::to_string(r.stale.size()) + " origin range(s), " + std::to_string(bytes) +
             " bytes, may be stale: their newest data was only on the cache (known from " +
             r.dirty_source + ")";
    default:
      return "whether the cache held data the origin lacks cannot be told (" + r.dirty_source + ")";
  }
}

void PrintDamage(const DamageReport& r, const std::string& name, const std::string& planned_repair) {
  std::printf("cache %s: damaged\n", name.c_str());
  if (!r.superblock_problem.empty()) std::printf("  superblock      %s\n", r.superblock_problem.c_str());
  if (!planned_repair.empty()) {
    // Everything but the superblock's checksum agrees: nothing is lost.
    std::printf("  repairable      'cachectl start %s' rewrites the superblock from the metadata store,\n"
                "                  keeping every block (the store, the origin and the cache device's sync\n"
                "                  mark agree)\n",
                name.c_str());
    return;
  }
  if (!r.store_problem.empty()) std::printf("  metadata        %s\n", r.store_problem.c_str());
  std::printf("  dirty data      %s\n", DescribeDirty(r).c_str());
  for (auto [at, len] : r.stale) {
    std::printf("  may be stale on the origin: bytes %llu..%llu\n", (unsigned long long)at,
                (unsigned long long)(at + len));
  }
  if (r.dirty == DamageReport::Dirty::kNone) {
    std::printf("  'cachectl rebuild %s' makes a new, cold cache over the origin; nothing is lost\n",
                name.c_str());
  } else {
    std::printf("  'cachectl rebuild %s --force' makes a new, cold cache; the ranges above keep the\n"
                "  origin's older data (restore them from a backup)\n", name.c_str());
  }
}

}  // namespace cachectl
