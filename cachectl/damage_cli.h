// The command line's view of a damaged cache: cachecore::AssessDamage over
// a stopped cache's devices and store, opened read-only, and how it is
// printed (check) or summed up in one line (start, rebuild).
#pragma once

#include <string>

#include "cachecore/metadata/damage.h"
#include "paths.h"

namespace cachectl {

// Fails only when a device cannot be opened at all.
cachecore::Result<cachecore::DamageReport> AssessNamedCache(const Dirs& dirs, const std::string& name,
                                                            CacheConfig& config);
// The line 'cachectl start' would print on rewriting a damaged superblock
// from the metadata store (cachecore::PlanSuperblockRepair over the
// devices and the store, opened read-only); empty when it would not.
std::string PlannedSuperblockRepair(const Dirs& dirs, const std::string& name, CacheConfig& config);
// The report, several lines, for cachectl check. `planned_repair`: what
// PlannedSuperblockRepair said; when set, start is the way out, not rebuild.
void PrintDamage(const cachecore::DamageReport& report, const std::string& name,
                 const std::string& planned_repair = "");
// "origin ranges ... may be stale" or "the origin holds all data", one phrase.
std::string DescribeDirty(const cachecore::DamageReport& report);

}  // namespace cachectl
