#include "cachecore/crypto/cache_key.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cachecore/metadata/checksum.h"

namespace cachecore {

namespace {

const EVP_CIPHER* Xts() {
  static EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, "AES-256-XTS", nullptr);
  return cipher;
}

const EVP_CIPHER* Ecb() {
  static EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, "AES-256-ECB", nullptr);
  return cipher;
}

// HMAC-SHA256(key, label): each derived key has a label of its own.
bool Derive(const uint8_t* key, size_t key_size, const std::string& label, uint8_t* out32) {
  size_t out_size = 0;
  return EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, key, key_size,
                   reinterpret_cast<const unsigned char*>(label.data()), label.size(), out32, 32,
                   &out_size) != nullptr &&
         out_size == 32;
}

std::atomic<uint64_t> next_key_id{1};

void PutLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

// One thread's contexts for one key: EVP contexts are not to be shared
// between threads, and setting a key up costs more than a unit's cipher.
struct CacheKey::Contexts {
  uint64_t id = 0;
  EVP_CIPHER_CTX* enc = nullptr;
  EVP_CIPHER_CTX* dec = nullptr;
  EVP_CIPHER_CTX* seal = nullptr;
  void Clear() {
    for (EVP_CIPHER_CTX** c : {&enc, &dec, &seal}) {
      EVP_CIPHER_CTX_free(*c);
      *c = nullptr;
    }
    id = 0;
  }
  ~Contexts() { Clear(); }
};

Result<std::shared_ptr<const CacheKey>> CacheKey::FromSecret(const uint8_t* secret, size_t size) {
  if (size < kMinSecretBytes) {
    return Status::InvalidArgument("the key has " + std::to_string(size) + " bytes; at least " +
                                   std::to_string(kMinSecretBytes) + " (256 bits) are needed");
  }
  if (size > kMaxSecretBytes) {
    return Status::InvalidArgument("the key has " + std::to_string(size) + " bytes; at most " +
                                   std::to_string(kMaxSecretBytes) + " are taken");
  }
  if (Xts() == nullptr || Ecb() == nullptr) return Status::NotSupported("libcrypto has no AES-256-XTS");
  std::shared_ptr<CacheKey> key(new CacheKey());
  key->id_ = next_key_id.fetch_add(1);
  if (!Derive(secret, size, "cachectl data key 1", key->xts_.data()) ||
      !Derive(secret, size, "cachectl data key 2", key->xts_.data() + 32) ||
      !Derive(secret, size, "cachectl check seal", key->seal_.data()) ||
      !Derive(secret, size, "cachectl key check", key->check_.data())) {
    return Status::NotSupported("libcrypto cannot compute HMAC-SHA256");
  }
  return std::shared_ptr<const CacheKey>(std::move(key));
}

CacheKey::~CacheKey() {
  OPENSSL_cleanse(xts_.data(), xts_.size());
  OPENSSL_cleanse(seal_.data(), seal_.size());
  OPENSSL_cleanse(check_.data(), check_.size());
}

std::array<uint8_t, 16> CacheKey::CheckValue(const Uuid& uuid) const {
  uint8_t full[32] = {};
  std::string label = "cachectl key check value ";
  label.append(reinterpret_cast<const char*>(uuid.data()), uuid.size());
  if (!Derive(check_.data(), check_.size(), label, full)) std::memset(full, 0, sizeof(full));
  std::array<uint8_t, 16> out{};
  std::memcpy(out.data(), full, out.size());
  return out;
}

CacheKey::Contexts& CacheKey::ContextsOfThisThread() const {
  // A few keys per thread (tests open several caches in one process).
  thread_local Contexts cache[4];
  thread_local unsigned next = 0;
  for (Contexts& c : cache) {
    if (c.id == id_) return c;
  }
  Contexts& c = cache[next++ % 4];
  c.Clear();
  c.enc = EVP_CIPHER_CTX_new();
  c.dec = EVP_CIPHER_CTX_new();
  c.seal = EVP_CIPHER_CTX_new();
  const bool ready = c.enc && c.dec && c.seal &&
                     EVP_EncryptInit_ex2(c.enc, Xts(), xts_.data(), nullptr, nullptr) == 1 &&
                     EVP_DecryptInit_ex2(c.dec, Xts(), xts_.data(), nullptr, nullptr) == 1 &&
                     EVP_EncryptInit_ex2(c.seal, Ecb(), seal_.data(), nullptr, nullptr) == 1 &&
                     EVP_CIPHER_CTX_set_padding(c.seal, 0) == 1;
  if (!ready) {
    c.Clear();
    return c;  // id 0: every use fails
  }
  c.id = id_;
  return c;
}

uint32_t CacheKey::Seal(uint32_t crc, uint64_t unit) const {
  uint8_t in[16] = {}, out[32] = {};
  PutLe(in, crc, 4);
  PutLe(in + 4, unit, 8);
  std::memcpy(in + 12, "SEAL", 4);
  Contexts& c = ContextsOfThisThread();
  int n = 0;
  if (c.id == 0 || EVP_EncryptUpdate(c.seal, out, &n, in, sizeof(in)) != 1 || n != 16) {
    // A check that cannot be sealed cannot be stored or compared: going
    // on would call good blocks damaged, or worse.
    std::fprintf(stderr, "cachecore: libcrypto failed to seal a block's checksum\n");
    std::abort();
  }
  return uint32_t{out[0]} | uint32_t{out[1]} << 8 | uint32_t{out[2]} << 16 | uint32_t{out[3]} << 24;
}

Status CacheKey::Crypt(bool encrypt, uint64_t offset, const uint8_t* in, uint8_t* out, uint64_t length) const {
  if (offset % kCipherUnit != 0 || length % kCipherUnit != 0) {
    return Status::InvalidArgument("encrypted I/O must be whole 4 KiB units");
  }
  Contexts& c = ContextsOfThisThread();
  if (c.id == 0) return Status::IoError("libcrypto cannot set up AES-256-XTS");
  EVP_CIPHER_CTX* ctx = encrypt ? c.enc : c.dec;
  for (uint64_t done = 0; done < length; done += kCipherUnit) {
    uint8_t tweak[16] = {};
    PutLe(tweak, (offset + done) / kCipherUnit, 8);
    int n = 0;
    const bool ok = (encrypt ? EVP_EncryptInit_ex2(ctx, nullptr, nullptr, tweak, nullptr)
                             : EVP_DecryptInit_ex2(ctx, nullptr, nullptr, tweak, nullptr)) == 1 &&
                    (encrypt ? EVP_EncryptUpdate(ctx, out + done, &n, in + done, kCipherUnit)
                             : EVP_DecryptUpdate(ctx, out + done, &n, in + done, kCipherUnit)) == 1 &&
                    n == static_cast<int>(kCipherUnit);
    if (!ok) return Status::IoError("libcrypto failed AES-256-XTS");
  }
  return Status::Ok();
}

Status CacheKey::Encrypt(uint64_t offset, const uint8_t* in, uint8_t* out, uint64_t length) const {
  return Crypt(true, offset, in, out, length);
}

Status CacheKey::Decrypt(uint64_t offset, const uint8_t* in, uint8_t* out, uint64_t length) const {
  return Crypt(false, offset, in, out, length);
}

Status CheckKeyWithStore(MetadataStore* store, const CacheKey* key) {
  Result<std::string> stored = StoredKeyCheck(store);
  if (!stored.ok()) return stored.status();
  if (stored.value().empty()) {
    if (key == nullptr) return Status::Ok();
    return Status::Mismatch("the cache is not encrypted: start it without a key");
  }
  if (key == nullptr) return Status::Mismatch("the cache is encrypted and opens only with its key");
  Result<CacheIdentity> id = store->GetIdentity();
  if (!id.ok()) return id.status();
  if (KeyCheckText(key->CheckValue(id->uuid)) != stored.value()) {
    return Status::Mismatch("the key given is not the key of this cache (its check value differs); nothing was "
                            "read or written");
  }
  return Status::Ok();
}

uint32_t BlockCheck(const CacheKey* key, const uint8_t* block, uint64_t cache_offset) {
  const uint32_t crc = Crc32c(block, kCipherUnit);
  return key == nullptr ? crc : key->Seal(crc, cache_offset / kCipherUnit);
}

}  // namespace cachecore
