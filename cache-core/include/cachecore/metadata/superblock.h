// The superblock: the first 4 KiB of the cache device. It names the cache
// (UUID), the origin it belongs to (size and identity), the line geometry and
// whether the last shutdown was clean. The metadata store keeps the same
// identity; the engine refuses to start when the two disagree.
//
// Layout (little-endian), 4096 bytes at offset 0:
//   0   char[8]  magic "CACHECTL"
//   8   u32      format version (kFormatVersion)
//   12  u32      flags (bit 0: clean shutdown; bit 1: dirty data at shutdown;
//                bit 2, format 4: the data area is encrypted)
//   16  u8[16]   cache UUID
//   32  u64      origin size in bytes
//   40  u32      line size in bytes
//   44  u32      reserved (0)
//   48  u64      data offset: where line 0 starts on the cache device
//   56  u64      line count
//   64  char[256] origin identity, NUL-padded
//   320 u64      format 3: the line space in use, in bytes (the end of the
//                last volume, docs/design.md "Volumes"); before: 0, the
//                origin's size
//   328 u8[16]   format 4, encrypted: the key check value (CacheKey::
//                CheckValue; never the key); zeros otherwise
//   4092 u32     CRC32C of bytes 0..4091
// From format 3 the origin fields name the cache's first volume as it was
// attached (the volume table in the store names them all).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "cachecore/devices/block_device.h"
#include "cachecore/base/status.h"

namespace cachecore {

class MetadataStore;

// The metadata format this build writes. 2: each line record carries the
// flush epoch it was built in, and the store the last completed flush, so a
// start derives which records are stable instead of rewriting them
// (docs/design.md, "Format versions"). 3: a cache serves several volumes
// (metadata/volume_table.h); a cache of format 2 is one volume at base 0.
// 4: the data area may be encrypted (the superblock says so and keeps the
// key's check value, as the store's `key_check` does): a build that knows
// no encryption must refuse such a cache rather than serve its ciphertext.
constexpr uint32_t kFormatVersion = 4;
// The oldest format a start upgrades in place.
constexpr uint32_t kOldestFormatVersion = 1;
// Ok for a format this build reads; kNotSupported saying why for a newer
// one (a newer cachectl made it), kCorruption for one that never existed.
// `what` names where the version was read ("the superblock").
Status CheckFormatVersion(uint32_t version, const std::string& what);
constexpr uint32_t kSuperblockSize = 4096;
// Line data starts 1 MiB into the cache device: aligned for any line size.
constexpr uint64_t kDataOffset = 1 << 20;

using Uuid = std::array<uint8_t, 16>;
Uuid NewRandomUuid();
std::string UuidToString(const Uuid& uuid);

// What both the superblock and the metadata store record about a cache.
struct CacheIdentity {
  Uuid uuid{};
  uint32_t format_version = kFormatVersion;
  uint64_t origin_size = 0;
  std::string origin_identity;
  uint32_t line_size = 0;
  uint64_t line_count = 0;
};

// The origin's lines, the last one maybe cut short by its end.
// REQUIRES: id.line_size > 0.
inline uint64_t OriginLines(const CacheIdentity& id) {
  return (id.origin_size + id.line_size - 1) / id.line_size;
}

// Lists what differs between two identities, one "field: a vs b" per entry,
// separated by "; ". Empty when they match.
std::string DescribeIdentityDifference(const CacheIdentity& expected, const CacheIdentity& found,
                                       const char* expected_name, const char* found_name);

struct Superblock {
  CacheIdentity identity;
  bool clean_shutdown = false;
  bool dirty_at_shutdown = false;  // only the cache holds some data
  uint64_t data_offset = kDataOffset;
  uint64_t line_space = 0;  // format 3; 0 before (then LineSpace() is the origin's size)
  bool encrypted = false;              // format 4
  std::array<uint8_t, 16> key_check{};  // format 4, encrypted: the key's check value
  uint64_t LineSpace() const { return line_space != 0 ? line_space : identity.origin_size; }
};

// Encodes into exactly kSuperblockSize bytes at `out`.
void EncodeSuperblock(const Superblock& sb, uint8_t* out);
// kNotFound when there is no cachectl magic (a blank or foreign device);
// kCorruption when the magic is there but the checksum or version is wrong.
Result<Superblock> DecodeSuperblock(const uint8_t* in);
// Reads and decodes the superblock at offset 0 of `cache`: kNotFound on a
// device that holds no cachectl cache, kIoError when it cannot be read.
Result<Superblock> ReadSuperblock(BlockDevice* cache);
// Zeroes the superblock, durably: the device no longer holds a cache.
Status EraseSuperblock(BlockDevice* cache);

// The sync mark: 4 KiB at kSyncMarkOffset on the cache device, the metadata
// store's sequence number as of its last completed sync. A store that
// reopens below it lost records it had made durable (a damaged log that
// its recovery cut short), and is refused.
//   0  u32  CRC32C of bytes 4..4095, seeded with the CRC32C of the UUID
//   4  u32  magic "SYNC"
//   8  u64  sequence number
constexpr uint64_t kSyncMarkOffset = 60 * 1024;
constexpr uint32_t kSyncMarkSize = 4096;
void EncodeSyncMark(const Uuid& uuid, uint64_t sequence, uint8_t* out);
// kNotFound for a blank page; kCorruption for one that fails its checksum.
Result<uint64_t> DecodeSyncMark(const Uuid& uuid, const uint8_t* in);
// Reads the mark of cache `uuid` from `cache`: kCorruption, saying what was
// lost, when `recovered_sequence` is below it or the mark is damaged; OK
// for a blank mark (a cache made before marks existed).
Status CheckSyncMark(BlockDevice* cache, const Uuid& uuid, uint64_t recovered_sequence);

// Repair of a damaged superblock from the metadata store, whose identity
// record holds every field the superblock holds except the shutdown flags.
//
// Repairable means damaged, not foreign: the magic and the format version
// field are intact and the checksum fails. A superblock without the magic
// (zeros, another filesystem) is not a cache's; one of another format
// version may be a newer cachectl's, whose checksum lies elsewhere.
// It is rewritten only when every check that can still be made agrees
// with the store: the store's format version; the origin's size and
// identity; the line size asked for (0: any); the cache device holds the
// store's line count of that size; and the sync mark on the cache device
// carries the store's cache UUID (its checksum is seeded with it) and a
// sequence the store has reached. A blank mark confirms nothing: refused.
// The fields of the damaged copy are not trusted (any of them may be the
// damage); the ones that differ from the store are named in the message.
//
// The rewritten superblock says the last shutdown was not clean and left
// dirty data: the flags were lost, so the next Engine::Open proves what a
// crash may have left, and nothing takes the cache for one without dirty data.
struct SuperblockRepair {
  Superblock superblock;  // the replacement: the store's identity
  std::string message;    // one line: what was damaged and what replaced it
};

// Reads only. nullopt when there is nothing to repair (the superblock is
// whole, or there is none: Engine::Open's own checks speak for those);
// kCorruption saying which check failed when the superblock is damaged but
// cannot be rewritten from `store`; kIoError when a device cannot be read.
Result<std::optional<SuperblockRepair>> PlanSuperblockRepair(BlockDevice* cache, BlockDevice* origin,
                                                             MetadataStore* store,
                                                             uint32_t wanted_line_size);
// PlanSuperblockRepair, then writes the replacement and flushes the cache
// device. Writes nothing unless every check passed.
Result<std::optional<SuperblockRepair>> RepairSuperblock(BlockDevice* cache, BlockDevice* origin,
                                                         MetadataStore* store,
                                                         uint32_t wanted_line_size);

// The store's config key that holds an encrypted cache's key check value
// (hex), so that a superblock rewritten from the store stays encrypted.
constexpr char kKeyCheckKey[] = "key_check";
std::string KeyCheckText(const std::array<uint8_t, 16>& check);
// The store's key check value ("" for a cache that is not encrypted);
// kIoError or kCorruption when the store cannot say.
Result<std::string> StoredKeyCheck(MetadataStore* store);

// The identity as a metadata-store value, and back.
std::string EncodeIdentity(const CacheIdentity& id);
Result<CacheIdentity> DecodeIdentity(const std::string& value);

}  // namespace cachecore
