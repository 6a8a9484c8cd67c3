#include "cachecore/superblock.h"

#include <cstring>
#include <random>
#include <sstream>

#include "cachecore/checksum.h"

namespace cachecore {

namespace {

constexpr char kMagic[8] = {'C', 'A', 'C', 'H', 'E', 'C', 'T', 'L'};
constexpr size_t kIdentityField = 256;

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

std::string DescribeIdentityDifference(const CacheIdentity& a, const CacheIdentity& b,
                                       const char* a_name, const char* b_name) {
  std::ostringstream out;
  auto field = [&](const char* name, const std::string& x, const std::string& y) {
    if (x == y) return;
    if (out.tellp() > 0) out << "; ";
    out << name << ": " << a_name << " has " << x << ", " << b_name << " has " << y;
  };
  field("cache UUID", UuidToString(a.uuid), UuidToString(b.uuid));
  field("format version", std::to_string(a.format_version), std::to_string(b.format_version));
  field("origin size", std::to_string(a.origin_size), std::to_string(b.origin_size));
  field("origin", a.origin_identity, b.origin_identity);
  field("line size", std::to_string(a.line_size), std::to_string(b.line_size));
  field("line count", std::to_string(a.line_count), std::to_string(b.line_count));
  return out.str();
}

void EncodeSuperblock(const Superblock& sb, uint8_t* out) {
  std::memset(out, 0, kSuperblockSize);
  std::memcpy(out, kMagic, 8);
  Put32(out + 8, sb.identity.format_version);
  Put32(out + 12, (sb.clean_shutdown ? 1u : 0u) | (sb.dirty_at_shutdown ? 2u : 0u));
  std::memcpy(out + 16, sb.identity.uuid.data(), 16);
  Put64(out + 32, sb.identity.origin_size);
  Put32(out + 40, sb.identity.line_size);
  Put64(out + 48, sb.data_offset);
  Put64(out + 56, sb.identity.line_count);
  size_t n = std::min(sb.identity.origin_identity.size(), kIdentityField - 1);
  std::memcpy(out + 64, sb.identity.origin_identity.data(), n);
  Put32(out + kSuperblockSize - 4, Crc32c(out, kSuperblockSize - 4));
}

Result<Superblock> DecodeSuperblock(const uint8_t* in) {
  if (std::memcmp(in, kMagic, 8) != 0) {
    return Status::NotFound("no cachectl superblock on this device");
  }
  if (Get32(in + kSuperblockSize - 4) != Crc32c(in, kSuperblockSize - 4)) {
    return Status::Corruption("the superblock fails its checksum");
  }
  Superblock sb;
  sb.identity.format_version = Get32(in + 8);
  if (sb.identity.format_version != kFormatVersion) {
    return Status::Corruption("superblock format version " +
                              std::to_string(sb.identity.format_version) + " is not supported (" +
                              std::to_string(kFormatVersion) + " is)");
  }
  sb.clean_shutdown = (Get32(in + 12) & 1) != 0;
  sb.dirty_at_shutdown = (Get32(in + 12) & 2) != 0;
  std::memcpy(sb.identity.uuid.data(), in + 16, 16);
  sb.identity.origin_size = Get64(in + 32);
  sb.identity.line_size = Get32(in + 40);
  sb.data_offset = Get64(in + 48);
  sb.identity.line_count = Get64(in + 56);
  const char* ident = reinterpret_cast<const char*>(in + 64);
  sb.identity.origin_identity.assign(ident, strnlen(ident, kIdentityField));
  return sb;
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

}  // namespace cachecore
