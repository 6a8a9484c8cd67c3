// Encryption at rest of the cached data (docs/design.md, "Encryption at
// rest"): the key a cache is opened with, and what is derived from it.
//
// The user's secret (a key file's bytes, or a kernel keyring key) is never
// used directly: HMAC-SHA256 derives from it the AES-256-XTS key for the
// data, a key that seals each block's stored checksum, and the check value
// the superblock keeps to tell the right key from a wrong one. None of them
// is written anywhere; the check value reveals nothing of the others.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "cachecore/base/status.h"
#include "cachecore/metadata/metadata_store.h"
#include "cachecore/metadata/superblock.h"  // Uuid

namespace cachecore {

// The data is encrypted in units of 4 KiB: a unit's tweak is its index on
// the cache device (its byte offset / 4096).
constexpr uint32_t kCipherUnit = 4096;

class CacheKey {
 public:
  // A secret of fewer bytes than this (256 bits) is refused.
  static constexpr size_t kMinSecretBytes = 32;
  static constexpr size_t kMaxSecretBytes = 4096;

  // Derives the keys from `secret`: kInvalidArgument for a secret shorter
  // than kMinSecretBytes or longer than kMaxSecretBytes; kNotSupported when
  // libcrypto lacks AES-256-XTS.
  static Result<std::shared_ptr<const CacheKey>> FromSecret(const uint8_t* secret, size_t size);
  ~CacheKey();
  CacheKey(const CacheKey&) = delete;
  CacheKey& operator=(const CacheKey&) = delete;

  // What the superblock of cache `uuid` holds to recognise this key.
  std::array<uint8_t, 16> CheckValue(const Uuid& uuid) const;
  // A block's stored check: `crc` (CRC32C of its plaintext) sealed with
  // the key and the block's unit index, so the store says nothing of the
  // plaintext to someone without the key.
  uint32_t Seal(uint32_t crc, uint64_t unit) const;
  // En- or decrypts `length` bytes (whole units) that lie at byte `offset`
  // of the cache device (a multiple of kCipherUnit); `out` may be `in`.
  // Safe from any thread. kIoError only when libcrypto fails.
  Status Encrypt(uint64_t offset, const uint8_t* in, uint8_t* out, uint64_t length) const;
  Status Decrypt(uint64_t offset, const uint8_t* in, uint8_t* out, uint64_t length) const;

  struct Contexts;  // a thread's cipher contexts for one key (cache_key.cc)

 private:
  CacheKey() = default;
  Contexts& ContextsOfThisThread() const;
  Status Crypt(bool encrypt, uint64_t offset, const uint8_t* in, uint8_t* out, uint64_t length) const;

  uint64_t id_ = 0;                   // tells keys apart in the threads' context caches
  std::array<uint8_t, 64> xts_{};     // AES-256-XTS: two 256-bit keys
  std::array<uint8_t, 32> seal_{};    // AES-256 for Seal
  std::array<uint8_t, 32> check_{};   // HMAC-SHA256 key of CheckValue
};

// Whether `key` opens the cache whose store is `store` (the store keeps the
// check value, as the superblock does): kMismatch, one line, for another
// key, for none where the cache is encrypted, or for one where it is not.
// Reads the store only: a start checks it before it writes anything.
Status CheckKeyWithStore(MetadataStore* store, const CacheKey* key);

// The check a cached block's record holds: CRC32C of its plaintext, sealed
// by `key` with the block's position when the cache is encrypted (`key`
// null: the bare CRC). `cache_offset`: the block's byte on the cache device.
uint32_t BlockCheck(const CacheKey* key, const uint8_t* block, uint64_t cache_offset);

}  // namespace cachecore
