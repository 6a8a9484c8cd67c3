#include "cache_key_source.h"

#include <fcntl.h>
#include <keyutils.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace cachectl {

using cachecore::CacheKey;
using cachecore::Result;
using cachecore::Status;

namespace {

std::string ModeText(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

Result<std::shared_ptr<const CacheKey>> FromBytes(std::vector<uint8_t>& secret, const std::string& what) {
  Result<std::shared_ptr<const CacheKey>> key = CacheKey::FromSecret(secret.data(), secret.size());
  OPENSSL_cleanse(secret.data(), secret.size());
  if (!key.ok()) return key.status().code() == cachecore::StatusCode::kInvalidArgument
                            ? Status::InvalidArgument(what + ": " + key.status().message())
                            : key.status();
  return key;
}

Result<std::shared_ptr<const CacheKey>> FromFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return errno == ENOENT ? Status::NotFound("key file " + path + " does not exist")
                           : Status::InvalidArgument("key file " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  std::vector<uint8_t> secret;
  Status s;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    s = Status::InvalidArgument("key file " + path + " is not a regular file");
  } else if ((st.st_mode & 077) != 0) {
    s = Status::InvalidArgument("key file " + path + " can be read or changed by others (mode " +
                                ModeText(st.st_mode) + "): chmod 600 " + path);
  } else if (st.st_size > static_cast<off_t>(CacheKey::kMaxSecretBytes)) {
    s = Status::InvalidArgument("key file " + path + " holds " + std::to_string(st.st_size) + " bytes; at most " +
                                std::to_string(CacheKey::kMaxSecretBytes) + " are taken");
  } else {
    secret.resize(static_cast<size_t>(st.st_size));
    if (!secret.empty() && read(fd, secret.data(), secret.size()) != static_cast<ssize_t>(secret.size())) {
      s = Status::IoError("cannot read key file " + path);
    }
  }
  close(fd);
  if (!s.ok()) {
    OPENSSL_cleanse(secret.data(), secret.size());
    return s;
  }
  return FromBytes(secret, "key file " + path);
}

// Root's user keyring first (a daemon run by systemd has a session keyring
// of its own), then whatever the caller's keyrings reach.
Result<std::shared_ptr<const CacheKey>> FromKeyring(const std::string& name) {
  key_serial_t id = keyctl_search(KEY_SPEC_USER_KEYRING, "user", name.c_str(), 0);
  if (id < 0) id = request_key("user", name.c_str(), nullptr, 0);
  if (id < 0) {
    return Status::NotFound("no key '" + name + "' in the kernel keyring (add one: keyctl padd user " + name +
                            " @u < KEYFILE)");
  }
  void* data = nullptr;
  const long size = keyctl_read_alloc(id, &data);
  if (size < 0) return Status::InvalidArgument("keyring key '" + name + "' cannot be read: " + std::strerror(errno));
  std::vector<uint8_t> secret(static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
  OPENSSL_cleanse(data, static_cast<size_t>(size));
  std::free(data);
  return FromBytes(secret, "keyring key '" + name + "'");
}

}  // namespace

Result<std::shared_ptr<const CacheKey>> LoadCacheKey(const KeySource& source) {
  return source.file.empty() ? FromKeyring(source.keyring) : FromFile(source.file);
}

}  // namespace cachectl
