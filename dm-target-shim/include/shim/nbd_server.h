// NbdServer: serves a block backend over the NBD protocol (fixed newstyle
// handshake, simple replies) on a unix socket, and on TCP only when an
// address is given. Many requests in flight per connection, answered as
// they complete; several connections at once.
//
// Protocol reference: NetworkBlockDevice/nbd doc/proto.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cachecore/status.h"

namespace shim {

using cachecore::Result;
using cachecore::Status;

// What the server exports. Calls come from the server's serving threads,
// several at once. Offsets and lengths are already checked against size().
class NbdBackend {
 public:
  virtual ~NbdBackend() = default;
  virtual uint64_t size() const = 0;
  virtual uint32_t preferred_block_size() const = 0;
  virtual Status Read(uint64_t offset, void* buffer, uint64_t length) = 0;
  virtual Status Write(uint64_t offset, const void* buffer, uint64_t length, bool fua) = 0;
  // Every write completed before it is durable when it returns OK, on
  // whichever connection it arrived (so MULTI_CONN holds).
  virtual Status Flush() = 0;
  virtual Status Trim(uint64_t offset, uint64_t length) = 0;
};

struct NbdServerOptions {
  std::string export_name;       // clients may ask for it or for "" (the default)
  std::string unix_path;         // created with mode 0600 (see socket_mode)
  unsigned socket_mode = 0600;
  int socket_group = -1;         // >= 0: the socket's group (with socket_mode 0660)
  std::string tcp_address;       // "host:port"; empty: no TCP listener
  // Requests run at once on each connection: each serving thread waits for
  // its I/O, so this is the queue depth the devices see. 8 held 4 KiB hits
  // at QD32 to ~35K IOPS where 32 reach ~55K on the same SSD file
  // (scripts/bench).
  unsigned worker_threads = 32;
};

class NbdServer {
 public:
  // Binds the sockets and starts accepting. Fails, with the path or address
  // in the message, when a socket cannot be created or bound.
  static Result<std::unique_ptr<NbdServer>> Start(NbdBackend* backend,
                                                  const NbdServerOptions& options);
  virtual ~NbdServer() = default;
  // Stops accepting, lets requests in flight finish, closes every
  // connection, removes the unix socket. Idempotent.
  virtual void Stop() = 0;
  virtual uint64_t connections_served() const = 0;
  // Serves an already connected socket whose peer skips the handshake and
  // sends requests at once (the kernel's NBD client). Takes the fd.
  virtual Status Adopt(int fd) = 0;
};

// Maximum payload of one request; larger requests end the connection.
constexpr uint32_t kNbdMaxPayload = 32u << 20;

}  // namespace shim
