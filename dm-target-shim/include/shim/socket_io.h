// Blocking socket helpers for the front ends: whole reads and writes, and
// big-endian encoding (the byte order of the NBD wire).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cachecore/base/status.h"

namespace shim {

// False on EOF or error (the peer is gone).
bool ReadFull(int fd, void* buf, size_t len);
bool WriteFull(int fd, const void* buf, size_t len);
bool WriteVecFull(int fd, iovec* iov, int count);

inline void PutBe16(uint8_t* p, uint16_t v) { p[0] = v >> 8; p[1] = v & 0xFF; }
inline void PutBe32(uint8_t* p, uint32_t v) { for (int i = 3; i >= 0; --i, v >>= 8) p[i] = v & 0xFF; }
inline void PutBe64(uint8_t* p, uint64_t v) { for (int i = 7; i >= 0; --i, v >>= 8) p[i] = v & 0xFF; }
inline uint16_t GetBe16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
inline uint32_t GetBe32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = v << 8 | p[i];
  return v;
}
inline uint64_t GetBe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

// A listening unix socket at `path` with `mode` (and group `gid` when >= 0);
// fails if the path exists.
cachecore::Result<int> ListenUnix(const std::string& path, unsigned mode, int gid = -1);
// A listening TCP socket on "host:port".
cachecore::Result<int> ListenTcp(const std::string& address);
// Whether "host:port" is a loopback address (127.0.0.0/8, ::1), resolved as
// ListenTcp resolves it; kInvalidArgument when it does not resolve.
cachecore::Result<bool> IsLoopbackTcp(const std::string& address);
// A connected unix socket, or an error naming the path.
cachecore::Result<int> ConnectUnix(const std::string& path);

}  // namespace shim
