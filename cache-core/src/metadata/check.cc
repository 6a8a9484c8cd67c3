#include "cachecore/metadata/check.h"

#include <unordered_set>

#include "cachecore/crypto/encrypted_device.h"
#include "cachecore/metadata/checksum.h"
#include "cachecore/metadata/superblock.h"

namespace cachecore {

namespace {
constexpr uint64_t kBlock = 4096;

Status CheckIdentity(const Superblock& sb, MetadataStore* store, BlockDevice* origin,
                     BlockDevice* cache, CheckReport* report) {
  Result<CacheIdentity> stored = store->GetIdentity();
  if (!stored.ok()) return Status::Mismatch("the metadata store holds no cache identity");
  CACHECORE_RETURN_IF_ERROR(CheckSyncMark(cache, sb.identity.uuid, store->LatestSequence()));
  std::string diff = DescribeIdentityDifference(sb.identity, stored.value(), "the superblock",
                                                "the metadata store");
  if (!diff.empty()) report->problems.push_back("superblock and metadata store differ: " + diff);
  if (sb.identity.origin_size != origin->size_bytes() ||
      sb.identity.origin_identity != origin->identity()) {
    report->problems.push_back("the origin is " + origin->identity() + " of " +
                               std::to_string(origin->size_bytes()) + " bytes; the cache was made for " +
                               sb.identity.origin_identity + " of " +
                               std::to_string(sb.identity.origin_size));
  }
  if (kDataOffset + sb.identity.line_count * sb.identity.line_size > cache->size_bytes()) {
    report->problems.push_back("the cache device is smaller than its superblock says");
  }
  return Status::Ok();
}
}  // namespace

Result<CheckReport> CheckCache(BlockDevice* origin, BlockDevice* cache, MetadataStore* store,
                               std::shared_ptr<const CacheKey> key) {
  CheckReport report;
  AlignedBuffer buf(kSuperblockSize);
  CACHECORE_RETURN_IF_ERROR(cache->Read(0, buf.data(), kSuperblockSize));
  Result<Superblock> sb = DecodeSuperblock(buf.data());
  if (!sb.ok()) return sb.status();
  const CacheKey* sealing = sb->encrypted ? key.get() : nullptr;
  Result<std::string> stored_check = StoredKeyCheck(store);
  if (stored_check.ok() && stored_check.value() != (sb->encrypted ? KeyCheckText(sb->key_check) : "")) {
    report.problems.push_back("superblock and metadata store disagree on the cache's encryption");
    return report;
  }
  // An encrypted cache's blocks are read through a decrypting device, with
  // its key alone.
  std::unique_ptr<BlockDevice> decrypting;
  if (sb->encrypted) {
    CACHECORE_RETURN_IF_ERROR(CheckKeyWithStore(store, key.get()));
    decrypting = NewEncryptedDevice(cache, std::move(key), kDataOffset);
  }
  BlockDevice* data = decrypting ? decrypting.get() : cache;
  report.uuid = UuidToString(sb->identity.uuid);
  report.clean_shutdown = sb->clean_shutdown;
  CACHECORE_RETURN_IF_ERROR(CheckIdentity(sb.value(), store, origin, cache, &report));
  if (!report.problems.empty()) return report;  // geometry unknown: records cannot be judged

  const uint64_t line_size = sb->identity.line_size;
  // A last line that the origin's end cuts short is a line all the same.
  const uint64_t origin_lines = (sb->LineSpace() + line_size - 1) / line_size;
  std::unordered_set<uint64_t> seen;
  AlignedBuffer line_buf(line_size);
  Status walk = store->ForEachLine([&](uint64_t slot, const LineRecord& r) -> Status {
    std::string where = "slot " + std::to_string(slot);
    if (slot >= sb->identity.line_count || r.origin_line >= origin_lines ||
        r.classes.size() != line_size / kBlock) {
      report.problems.push_back(where + ": the record does not fit the cache's geometry");
      return Status::Ok();
    }
    if (!seen.insert(r.origin_line).second) {
      report.problems.push_back(where + ": origin line " + std::to_string(r.origin_line) +
                                " is recorded twice");
    }
    ++report.lines;
    bool dirty_line = false;
    const uint64_t at = kDataOffset + slot * line_size;
    bool readable = data->Read(at, line_buf.data(), line_size).ok();
    for (size_t b = 0; b < r.classes.size(); ++b) {
      BlockClass c = r.classes[b];
      if (c == BlockClass::kInvalid) continue;
      bool dirty = c == BlockClass::kDirty || c == BlockClass::kDirtyFresh ||
                   c == BlockClass::kDirtyOverwritten;
      dirty_line |= dirty;
      bool matches = readable && BlockCheck(sealing, line_buf.data() + b * kBlock, at + b * kBlock) == r.crcs[b];
      if (matches) {
        ++report.blocks_verified;
      } else if (c != BlockClass::kClean && c != BlockClass::kDirty) {
        ++report.unsettled_blocks;
      } else if (dirty) {
        ++report.dirty_blocks_bad;
        uint64_t at = r.origin_line * line_size + b * kBlock;
        report.lost_ranges.push_back({at, kBlock});
      } else {
        ++report.clean_blocks_bad;
      }
    }
    report.dirty_lines += dirty_line ? 1 : 0;
    return Status::Ok();
  });
  if (!walk.ok()) report.problems.push_back("metadata: " + walk.message());
  if (report.clean_blocks_bad > 0) {
    report.problems.push_back(std::to_string(report.clean_blocks_bad) +
                              " clean block(s) fail their checksum: the cache device damaged them "
                              "(the origin has the data; reads repair them)");
  }
  if (report.dirty_blocks_bad > 0) {
    report.problems.push_back(std::to_string(report.dirty_blocks_bad) +
                              " dirty block(s) fail their checksum: their newest data is lost");
  }
  return report;
}

}  // namespace cachecore
