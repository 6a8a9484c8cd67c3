#include "cachecore/metadata/superblock.h"

#include <bit>
#include <cstring>
#include <random>
#include <sstream>

#include "cachecore/metadata/checksum.h"
#include "cachecore/metadata/metadata_store.h"
#include "cachecore/metadata/volume_table.h"

namespace cachecore {

namespace {

constexpr char kMagic[8] = {'C', 'A', 'C', 'H', 'E', 'C', 'T', 'L'};
constexpr size_t kIdentityField = 256;
constexpr size_t kKeyCheckAt = 328;

void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t Get32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
uint64_t Get64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }

// Identity fields in a fixed order, shared by the store encoding.
void AppendIdentity(std::string& out, const CacheIdentity& id) {
  uint8_t fixed[16 + 4 + 8 + 4 + 8];
  std::memcpy(fixed, id.uuid.data(), 16);
  Put32(fixed + 16, id.format_version);
  Put64(fixed + 20, id.origin_size);
  Put32(fixed + 28, id.line_size);
  Put64(fixed + 32, id.line_count);
  out.append(reinterpret_cast<const char*>(fixed), sizeof(fixed));
  out.append(id.origin_identity);
}

}  // namespace

Uuid NewRandomUuid() {
  std::random_device rd;
  Uuid uuid;
  for (auto& b : uuid) b = static_cast<uint8_t>(rd());
  uuid[6] = (uuid[6] & 0x0F) | 0x40;  // version 4
  uuid[8] = (uuid[8] & 0x3F) | 0x80;  // RFC 4122 variant
  return uuid;
}

std::string UuidToString(const Uuid& uuid) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[uuid[i] >> 4];
    s += hex[uuid[i] & 15];
  }
  return s;
}

namespace {

// Calls `visit(name, a's value, b's value)` for each identity field, as text.
template <typename Visit>
void ForEachIdentityField(const CacheIdentity& a, const CacheIdentity& b, Visit visit) {
  visit("cache UUID", UuidToString(a.uuid), UuidToString(b.uuid));
  visit("format version", std::to_string(a.format_version), std::to_string(b.format_version));
  visit("origin size", std::to_string(a.origin_size), std::to_string(b.origin_size));
  visit("origin", a.origin_identity, b.origin_identity);
  visit("line size", std::to_string(a.line_size), std::to_string(b.line_size));
  visit("line count", std::to_string(a.line_count), std::to_string(b.line_count));
}

}  // namespace

std::string DescribeIdentityDifference(const CacheIdentity& a, const CacheIdentity& b,
                                       const char* a_name, const char* b_name) {
  std::ostringstream out;
  ForEachIdentityField(a, b, [&](const char* name, const std::string& x, const std::string& y) {
    if (x == y) return;
    if (out.tellp() > 0) out << "; ";
    out << name << ": " << a_name << " has " << x << ", " << b_name << " has " << y;
  });
  return out.str();
}

std::string KeyCheckText(const std::array<uint8_t, 16>& check) {
  static const char kHex[] = "0123456789abcdef";
  std::string text;
  for (uint8_t b : check) {
    text += kHex[b >> 4];
    text += kHex[b & 15];
  }
  return text;
}

namespace {

std::optional<std::array<uint8_t, 16>> ParseKeyCheck(const std::string& text) {
  std::array<uint8_t, 16> out{};
  if (text.size() != 2 * out.size()) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

}  // namespace

Result<std::string> StoredKeyCheck(MetadataStore* store) {
  Result<std::string> check = store->GetConfig(kKeyCheckKey);
  if (check.ok()) return check.value();
  if (check.status().code() == StatusCode::kNotFound) return std::string();  // made before encryption existed
  return check.status();
}

void EncodeSuperblock(const Superblock& sb, uint8_t* out) {
  std::memset(out, 0, kSuperblockSize);
  std::memcpy(out, kMagic, 8);
  Put32(out + 8, sb.identity.format_version);
  Put32(out + 12, (sb.clean_shutdown ? 1u : 0u) | (sb.dirty_at_shutdown ? 2u : 0u) | (sb.encrypted ? 4u : 0u));
  std::memcpy(out + 16, sb.identity.uuid.data(), 16);
  Put64(out + 32, sb.identity.origin_size);
  Put32(out + 40, sb.identity.line_size);
  Put64(out + 48, sb.data_offset);
  Put64(out + 56, sb.identity.line_count);
  size_t n = std::min(sb.identity.origin_identity.size(), kIdentityField - 1);
  std::memcpy(out + 64, sb.identity.origin_identity.data(), n);
  if (sb.identity.format_version >= 3) Put64(out + 64 + kIdentityField, sb.line_space);
  if (sb.encrypted) std::memcpy(out + kKeyCheckAt, sb.key_check.data(), sb.key_check.size());
  Put32(out + kSuperblockSize - 4, Crc32c(out, kSuperblockSize - 4));
}

namespace {

bool HasMagic(const uint8_t* in) { return std::memcmp(in, kMagic, 8) == 0; }
bool ChecksumMatches(const uint8_t* in) {
  return Get32(in + kSuperblockSize - 4) == Crc32c(in, kSuperblockSize - 4);
}

// The fields as they read, checked or not.
Superblock DecodeFields(const uint8_t* in) {
  Superblock sb;
  sb.identity.format_version = Get32(in + 8);
  sb.clean_shutdown = (Get32(in + 12) & 1) != 0;
  sb.dirty_at_shutdown = (Get32(in + 12) & 2) != 0;
  std::memcpy(sb.identity.uuid.data(), in + 16, 16);
  sb.identity.origin_size = Get64(in + 32);
  sb.identity.line_size = Get32(in + 40);
  sb.data_offset = Get64(in + 48);
  sb.identity.line_count = Get64(in + 56);
  const char* ident = reinterpret_cast<const char*>(in + 64);
  sb.identity.origin_identity.assign(ident, strnlen(ident, kIdentityField));
  if (sb.identity.format_version >= 3) sb.line_space = Get64(in + 64 + kIdentityField);
  sb.encrypted = sb.identity.format_version >= 4 && (Get32(in + 12) & 4) != 0;
  if (sb.encrypted) std::memcpy(sb.key_check.data(), in + kKeyCheckAt, sb.key_check.size());
  return sb;
}

}  // namespace

Result<Superblock> DecodeSuperblock(const uint8_t* in) {
  if (!HasMagic(in)) return Status::NotFound("no cachectl superblock on this device");
  if (!ChecksumMatches(in)) return Status::Corruption("the superblock fails its checksum");
  Superblock sb = DecodeFields(in);
  CACHECORE_RETURN_IF_ERROR(CheckFormatVersion(sb.identity.format_version, "the superblock"));
  return sb;
}

Status CheckFormatVersion(uint32_t version, const std::string& what) {
  if (version > kFormatVersion) {
    return Status::NotSupported(what + " is in metadata format " + std::to_string(version) +
                                ", newer than this cachectl knows (" + std::to_string(kOldestFormatVersion) +
                                " to " + std::to_string(kFormatVersion) +
                                "): a newer cachectl made this cache; start it with that one");
  }
  if (version < kOldestFormatVersion) {
    return Status::Corruption(what + " has format version " + std::to_string(version) +
                              ", which no cachectl ever wrote");
  }
  return Status::Ok();
}

std::string EncodeIdentity(const CacheIdentity& id) {
  std::string out;
  AppendIdentity(out, id);
  return out;
}

Result<CacheIdentity> DecodeIdentity(const std::string& value) {
  constexpr size_t kFixed = 40;
  if (value.size() < kFixed) return Status::Corruption("identity record is truncated");
  const auto* p = reinterpret_cast<const uint8_t*>(value.data());
  CacheIdentity id;
  std::memcpy(id.uuid.data(), p, 16);
  id.format_version = Get32(p + 16);
  id.origin_size = Get64(p + 20);
  id.line_size = Get32(p + 28);
  id.line_count = Get64(p + 32);
  id.origin_identity = value.substr(kFixed);
  return id;
}

Result<Superblock> ReadSuperblock(BlockDevice* cache) {
  AlignedBuffer buf(kSuperblockSize);
  Status s = cache->Read(0, buf.data(), kSuperblockSize);
  if (!s.ok()) return Status::IoError("cannot read the superblock of " + cache->identity() + ": " +
                                      s.message());
  return DecodeSuperblock(buf.data());
}

Status EraseSuperblock(BlockDevice* cache) {
  AlignedBuffer blank(kSuperblockSize);
  CACHECORE_RETURN_IF_ERROR(cache->Write(0, blank.data(), kSuperblockSize));
  return cache->Flush();
}

namespace {
constexpr uint32_t kSyncMagic = 0x434E5953;  // "SYNC"
uint32_t SyncMarkCrc(const Uuid& uuid, const uint8_t* page) {
  return Crc32c(page + 4, kSyncMarkSize - 4, Crc32c(uuid.data(), uuid.size()));
}
}  // namespace

void EncodeSyncMark(const Uuid& uuid, uint64_t sequence, uint8_t* out) {
  std::memset(out, 0, kSyncMarkSize);
  std::memcpy(out + 4, &kSyncMagic, 4);
  std::memcpy(out + 8, &sequence, 8);
  uint32_t crc = SyncMarkCrc(uuid, out);
  std::memcpy(out, &crc, 4);
}

Result<uint64_t> DecodeSyncMark(const Uuid& uuid, const uint8_t* in) {
  uint32_t crc = 0, magic = 0;
  std::memcpy(&crc, in, 4);
  std::memcpy(&magic, in + 4, 4);
  if (magic != kSyncMagic) return Status::NotFound("no sync mark");
  if (crc != SyncMarkCrc(uuid, in)) return Status::Corruption("the sync mark fails its checksum");
  uint64_t sequence = 0;
  std::memcpy(&sequence, in + 8, 8);
  return sequence;
}

Status CheckSyncMark(BlockDevice* cache, const Uuid& uuid, uint64_t recovered_sequence) {
  AlignedBuffer page(kSyncMarkSize);
  CACHECORE_RETURN_IF_ERROR(cache->Read(kSyncMarkOffset, page.data(), kSyncMarkSize));
  Result<uint64_t> mark = DecodeSyncMark(uuid, page.data());
  if (mark.status().code() == StatusCode::kNotFound) return Status::Ok();
  if (!mark.ok()) return mark.status();
  if (recovered_sequence < mark.value()) {
    return Status::Corruption("the metadata store lost records it had made durable (its log is damaged): "
                              "it recovered to record " + std::to_string(recovered_sequence) +
                              ", but record " + std::to_string(mark.value()) + " had been synced");
  }
  return Status::Ok();
}

namespace {

// The store's identity against the devices: what a damaged superblock
// leaves to check. kCorruption saying what disagrees.
Status CheckStoreFitsDevices(const CacheIdentity& id, BlockDevice* cache, BlockDevice* origin,
                             uint32_t wanted_line_size) {
  const std::string store = "the store's ";
  CACHECORE_RETURN_IF_ERROR(CheckFormatVersion(id.format_version, "the store"));
  if (id.origin_identity != origin->identity() || id.origin_size != origin->size_bytes()) {
    return Status::Corruption(store + "origin is " + id.origin_identity + " of " +
                              std::to_string(id.origin_size) + " bytes, not " + origin->identity() +
                              " of " + std::to_string(origin->size_bytes()));
  }
  if (!std::has_single_bit(id.line_size) || id.line_size < 4096 || id.line_size > (1u << 20)) {
    return Status::Corruption(store + "line size " + std::to_string(id.line_size) +
                              " is not a power of two from 4K to 1M");
  }
  if (wanted_line_size != 0 && wanted_line_size != id.line_size) {
    return Status::Corruption(store + "line size is " + std::to_string(id.line_size) + ", " +
                              std::to_string(wanted_line_size) + " was asked for");
  }
  uint64_t size = cache->size_bytes();
  uint64_t room = size > kDataOffset ? (size - kDataOffset) / id.line_size : 0;
  if (id.line_count == 0 || id.line_count > room) {
    return Status::Corruption(store + std::to_string(id.line_count) + " lines of " +
                              std::to_string(id.line_size) + " bytes do not fit " + cache->identity() +
                              " (" + std::to_string(size) + " bytes)");
  }
  return Status::Ok();
}

// The sync mark is the cache device's own witness of whose it is: it is
// written after every metadata sync, with a checksum seeded by the UUID.
Status CheckSyncMarkVouches(BlockDevice* cache, const Uuid& uuid, uint64_t store_sequence) {
  AlignedBuffer page(kSyncMarkSize);
  Status read = cache->Read(kSyncMarkOffset, page.data(), kSyncMarkSize);
  if (!read.ok()) {
    return Status::IoError("cannot read the sync mark of " + cache->identity() + ": " + read.message());
  }
  Result<uint64_t> mark = DecodeSyncMark(uuid, page.data());
  const std::string where = "the sync mark on " + cache->identity();
  if (mark.status().code() == StatusCode::kNotFound) {
    return Status::Corruption(where + " is blank, so nothing on the device confirms it holds cache " +
                              UuidToString(uuid));
  }
  if (!mark.ok()) {
    return Status::Corruption(where + " is not that of cache " + UuidToString(uuid) +
                              " (another cache's device, or a damaged mark)");
  }
  if (mark.value() > store_sequence) {
    return Status::Corruption("the store recovered to record " + std::to_string(store_sequence) +
                              ", but the sync mark says record " + std::to_string(mark.value()) +
                              " had been synced (the store lost records, or is an older copy)");
  }
  return Status::Ok();
}

// Every check a damaged superblock leaves, in order; kCorruption (or
// kIoError) from the first that fails.
Status CheckRepairable(const Superblock& damaged, const CacheIdentity& stored, BlockDevice* cache,
                       BlockDevice* origin, uint64_t store_sequence, uint32_t wanted_line_size) {
  if (damaged.identity.format_version < kOldestFormatVersion ||
      damaged.identity.format_version > kFormatVersion) {
    return Status::Corruption("its format version field reads " +
                              std::to_string(damaged.identity.format_version) + ", not " +
                              std::to_string(kOldestFormatVersion) + " to " +
                              std::to_string(kFormatVersion) +
                              " (another format, or more than a bad checksum)");
  }
  CACHECORE_RETURN_IF_ERROR(CheckStoreFitsDevices(stored, cache, origin, wanted_line_size));
  return CheckSyncMarkVouches(cache, stored.uuid, store_sequence);
}

// The fields of the damaged copy that differ from the store's, by name.
std::string DamagedFields(const Superblock& damaged, const CacheIdentity& stored) {
  std::string names;
  auto add = [&](const char* name) { names += (names.empty() ? "" : ", ") + std::string(name); };
  ForEachIdentityField(damaged.identity, stored,
                       [&](const char* name, const std::string& x, const std::string& y) {
                         if (x != y) add(name);
                       });
  if (damaged.data_offset != kDataOffset) add("data offset");
  return names;
}

SuperblockRepair RepairFrom(const CacheIdentity& stored, const Superblock& damaged, BlockDevice* cache) {
  SuperblockRepair repair;
  repair.superblock.identity = stored;
  repair.superblock.clean_shutdown = false;    // lost with the checksum: a crash is assumed
  repair.superblock.dirty_at_shutdown = true;  // likewise: there may be dirty data
  repair.message = "the superblock on " + cache->identity() +
                   " failed its checksum; rewritten from the metadata store (cache UUID " +
                   UuidToString(stored.uuid) + ")";
  std::string wrong = DamagedFields(damaged, stored);
  if (!wrong.empty()) repair.message += "; the damaged copy had a wrong " + wrong;
  return repair;
}

}  // namespace

Result<std::optional<SuperblockRepair>> PlanSuperblockRepair(BlockDevice* cache, BlockDevice* origin,
                                                             MetadataStore* store,
                                                             uint32_t wanted_line_size) {
  AlignedBuffer raw(kSuperblockSize);
  Status read = cache->Read(0, raw.data(), kSuperblockSize);
  if (!read.ok()) {
    return Status::IoError("cannot read the superblock of " + cache->identity() + ": " + read.message());
  }
  if (!HasMagic(raw.data()) || ChecksumMatches(raw.data())) return std::optional<SuperblockRepair>();
  const std::string refused = "the superblock on " + cache->identity() +
                              " fails its checksum and is not rewritten from the metadata store: ";
  Result<CacheIdentity> stored = store->GetIdentity();
  if (!stored.ok()) {
    return Status::Corruption(refused + "the store holds no cache identity (" +
                              stored.status().message() + ")");
  }
  Superblock damaged = DecodeFields(raw.data());
  Status checked = CheckRepairable(damaged, stored.value(), cache, origin, store->LatestSequence(),
                                   wanted_line_size);
  if (checked.code() == StatusCode::kIoError) return checked;
  if (!checked.ok()) return Status::Corruption(refused + checked.message());
  SuperblockRepair repair = RepairFrom(stored.value(), damaged, cache);
  if (stored->format_version >= 3) {  // the line space is the volume table's
    Result<std::string> text = store->GetConfig(kVolumesKey);
    Result<std::vector<VolumeRecord>> table =
        text.ok() ? DecodeVolumeTable(text.value()) : Result<std::vector<VolumeRecord>>(text.status());
    if (!table.ok()) return Status::Corruption(refused + "its volume table: " + table.status().message());
    repair.superblock.line_space = LineSpaceBytes(table.value());
  }
  // An encrypted cache stays encrypted, with the check value the store kept.
  Result<std::string> check = StoredKeyCheck(store);
  if (!check.ok()) return Status::Corruption(refused + "the store's key check value: " + check.status().message());
  if (!check.value().empty()) {
    std::optional<std::array<uint8_t, 16>> value = ParseKeyCheck(check.value());
    if (!value) return Status::Corruption(refused + "the store's key check value is damaged");
    repair.superblock.encrypted = true;
    repair.superblock.key_check = *value;
  }
  return std::optional<SuperblockRepair>(std::move(repair));
}

Result<std::optional<SuperblockRepair>> RepairSuperblock(BlockDevice* cache, BlockDevice* origin,
                                                         MetadataStore* store,
                                                         uint32_t wanted_line_size) {
  Result<std::optional<SuperblockRepair>> plan =
      PlanSuperblockRepair(cache, origin, store, wanted_line_size);
  if (!plan.ok() || !plan->has_value()) return plan;
  AlignedBuffer buf(kSuperblockSize);
  EncodeSuperblock(plan->value().superblock, buf.data());
  CACHECORE_RETURN_IF_ERROR(cache->Write(0, buf.data(), kSuperblockSize));
  CACHECORE_RETURN_IF_ERROR(cache->Flush());
  return plan;
}

}  // namespace cachecore
