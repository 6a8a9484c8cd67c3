// Where an encrypted cache's key comes from (attach --key-file FILE or
// --key-keyring NAME): cache.conf keeps the file's path or the key's name,
// never the key. Internal to the cachectl executable.
#pragma once

#include <memory>
#include <string>

#include "cachecore/base/status.h"
#include "cachecore/crypto/cache_key.h"

namespace cachectl {

struct KeySource {
  std::string file;     // a file of 32 to 4096 random bytes, readable by its owner only
  std::string keyring;  // the description of a "user" key in root's kernel keyring
  bool empty() const { return file.empty() && keyring.empty(); }
  std::string Describe() const { return file.empty() ? "keyring key '" + keyring + "'" : "key file " + file; }
};

// Reads the key and derives the cache's keys from it: kNotFound for a file
// or keyring key that is not there, kInvalidArgument for one that is too
// short or long, or a file others can read (saying how to fix it).
cachecore::Result<std::shared_ptr<const cachecore::CacheKey>> LoadCacheKey(const KeySource& source);

}  // namespace cachectl
