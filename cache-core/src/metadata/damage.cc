#include "cachecore/metadata/damage.h"

#include <algorithm>

#include "cachecore/metadata/superblock.h"

namespace cachecore {

namespace {

constexpr uint64_t kBlock = 4096;

bool IsDirty(BlockClass c) {
  return c == BlockClass::kDirty || c == BlockClass::kDirtyFresh || c == BlockClass::kDirtyOverwritten;
}

void Merge(OriginRanges* ranges) {
  std::sort(ranges->begin(), ranges->end());
  OriginRanges merged;
  for (auto [at, len] : *ranges) {
    if (!merged.empty() && merged.back().first + merged.back().second >= at) {
      uint64_t end = std::max(merged.back().first + merged.back().second, at + len);
      merged.back().second = end - merged.back().first;
    } else {
      merged.emplace_back(at, len);
    }
  }
  ranges->swap(merged);
}

// The dirty blocks the store records, as origin ranges.
Status DirtyFromRecords(MetadataStore* store, uint32_t line_size, OriginRanges* out) {
  Status walk = store->ForEachLine([&](uint64_t, const LineRecord& r) {
    for (size_t b = 0; b < r.classes.size(); ++b) {
      if (IsDirty(r.classes[b])) out->emplace_back(r.origin_line * line_size + b * kBlock, kBlock);
    }
    return Status::Ok();
  });
  Merge(out);
  return walk;
}

void Conclude(DamageReport* r, OriginRanges ranges, std::string source) {
  r->dirty = ranges.empty() ? DamageReport::Dirty::kNone : DamageReport::Dirty::kSome;
  r->stale = std::move(ranges);
  r->dirty_source = std::move(source);
}

}  // namespace

DamageReport AssessDamage(BlockDevice* cache, MetadataStore* store, const std::string& store_error) {
  DamageReport r;
  if (!store) r.store_problem = store_error.empty() ? "the metadata store is missing" : store_error;
  Result<Superblock> sb = ReadSuperblock(cache);
  if (!sb.ok()) {
    r.superblock_missing = sb.status().code() == StatusCode::kNotFound;
    r.superblock_problem = r.superblock_missing
                               ? cache->identity() + " holds no superblock (overwritten, or released by a detach)"
                               : sb.status().message();
  }
  std::optional<CacheIdentity> stored;
  if (store) {
    Result<CacheIdentity> id = store->GetIdentity();
    if (!id.ok()) r.store_problem = "the metadata store holds no cache identity (" + id.status().message() + ")";
    else stored = id.value();
  }
  if (sb.ok() && stored) {
    std::string diff = DescribeIdentityDifference(sb->identity, *stored, "the superblock", "the metadata store");
    if (!diff.empty()) r.store_problem = "the metadata store belongs to another cache: " + diff;
  }
  if (stored && r.store_problem.empty() && sb.ok()) {
    Status complete = CheckSyncMark(cache, sb->identity.uuid, store->LatestSequence());
    if (!complete.ok()) r.store_problem = complete.message();
  }
  if (stored && r.store_problem.empty()) {
    OriginRanges ranges;
    Status walk = DirtyFromRecords(store, stored->line_size, &ranges);
    if (walk.ok()) {
      Conclude(&r, std::move(ranges), "the metadata store's records");
      return r;
    }
    r.store_problem = "a line record cannot be read (" + walk.message() + ")";
  }
  if (!sb.ok()) {
    r.dirty_source = "nothing: neither the superblock nor the metadata store can be read";
    return r;
  }
  if (sb->clean_shutdown && !sb->dirty_at_shutdown) {
    Conclude(&r, {}, "the superblock (the last shutdown was clean, with no dirty data)");
    return r;
  }
  Result<OriginRanges> map = DirtyMap::ReadStaleRanges(cache, sb->identity, sb->LineSpace());
  if (!map.ok()) {
    r.dirty_source = "nothing: " + map.status().message();
    return r;
  }
  DirtyMap geometry(sb->identity, sb->LineSpace());
  Conclude(&r, map.value(), "the dirty-region map on the cache device (regions of " +
                                std::to_string(geometry.region_size()) + " bytes)");
  return r;
}

}  // namespace cachecore
