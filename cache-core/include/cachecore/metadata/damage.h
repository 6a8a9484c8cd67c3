// AssessDamage: what can still be said about a stopped cache whose
// superblock or metadata store is damaged or missing: whether the origin
// holds all the data, and if not, which of its ranges may be stale (their
// newest data was only on the cache). Reads only. cachectl check, start and
// rebuild use it.
#pragma once

#include <string>

#include "cachecore/devices/block_device.h"
#include "cachecore/metadata/dirty_map.h"
#include "cachecore/metadata/metadata_store.h"

namespace cachecore {

struct DamageReport {
  std::string superblock_problem;  // empty: readable, whole, and agrees with the store
  std::string store_problem;       // empty: opens and every record reads
  enum class Dirty { kNone, kSome, kUnknown } dirty = Dirty::kUnknown;
  std::string dirty_source;        // how that is known (or why it is not)
  OriginRanges stale;              // with kSome: ranges that may be stale on the origin
  bool superblock_missing = false; // no superblock at all (released, or overwritten)
  bool damaged() const { return !superblock_problem.empty() || !store_problem.empty(); }
  // No superblock, an intact store and nothing dirty: what a detach leaves
  // when it stops after releasing the device (finishing it loses nothing).
  bool released_with_nothing_dirty() const {
    return superblock_missing && store_problem.empty() && dirty == Dirty::kNone;
  }
};

// `store` is the cache's metadata store opened read-only, or null when it
// would not open; `store_error` then says why.
DamageReport AssessDamage(BlockDevice* cache, MetadataStore* store, const std::string& store_error);

}  // namespace cachecore
