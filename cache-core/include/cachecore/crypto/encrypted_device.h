// A cache device whose data area is encrypted (docs/design.md, "Encryption
// at rest"): what is written at or past `data_offset` reaches the device
// as AES-256-XTS ciphertext, 4 KiB units with their index as the tweak,
// and is decrypted as it is read back. Below `data_offset` (the
// superblock, the sync mark, the dirty-region map: no user data) bytes
// pass as they are, so a start can read the superblock before it has a key.
#pragma once

#include <memory>

#include "cachecore/crypto/cache_key.h"
#include "cachecore/devices/block_device.h"

namespace cachecore {

// `inner` is not owned and outlives the result. A request in the data area
// must be whole 4 KiB units (kInvalidArgument otherwise, nothing done), and
// none may span `data_offset`. Writes go out from a bounce buffer (the
// caller's stays plaintext); reads are decrypted in the caller's buffer.
std::unique_ptr<BlockDevice> NewEncryptedDevice(BlockDevice* inner, std::shared_ptr<const CacheKey> key,
                                                uint64_t data_offset);

}  // namespace cachecore
