// NbdServer: serves a BlockBackend over the NBD protocol (fixed newstyle
// handshake, simple replies) on a unix socket, and on TCP only when an
// address is given. Many requests in flight per connection, answered as
// they complete; several connections at once.
//
// Protocol reference: NetworkBlockDevice/nbd doc/proto.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shim/block_backend.h"
#include "shim/nbd_tls.h"

namespace shim {

struct NbdServerOptions {
  std::string export_name;       // the default export: clients may ask for it or for ""
  std::string unix_path;         // created with mode 0600 (see socket_mode)
  unsigned socket_mode = 0600;
  int socket_group = -1;         // >= 0: the socket's group (with socket_mode 0660)
  std::string tcp_address;       // "host:port"; empty: no TCP listener
  // For a backend that is not asynchronous (a test's, the bench's emulated
  // disk): serving threads per connection, each waits for its I/O, so this
  // is the queue depth the devices see. An asynchronous backend (the
  // engine) is served on a reactor per connection instead (nbd_async.h).
  unsigned worker_threads = 32;
  // The doors' limits. Connections over max_connections are closed as
  // they come (the kernel's, by Adopt, are not counted). Request buffers
  // of all connections together stay within buffer_bytes: past it a
  // connection reads no further request until others give bytes back,
  // except one of up to 1 MiB for a connection that holds none (a client
  // that never reads its replies cannot stop the others). A connection
  // that has not finished its handshake after handshake_timeout_seconds
  // (0: no limit) is closed.
  unsigned max_connections = 32;
  uint64_t buffer_bytes = 256ull << 20;
  unsigned handshake_timeout_seconds = 10;
  // Set: every TCP client must start TLS (NBD_OPT_STARTTLS) before any
  // other option (shim/nbd_tls.h). The unix socket stays plain: its file
  // permissions say who may connect.
  std::shared_ptr<const NbdTls> tls;
};

class NbdServer {
 public:
  // Binds the sockets and starts accepting. Fails, with the path or address
  // in the message, when a socket cannot be created or bound. `backend` is
  // not owned and must outlive the server; the serving threads call it,
  // several at once.
  static Result<std::unique_ptr<NbdServer>> Start(BlockBackend* backend,
                                                    const NbdServerOptions& options);
  virtual ~NbdServer() = default;
  // Stops accepting, lets requests in flight finish, closes every
  // connection, removes the unix socket. Idempotent.
  virtual void Stop() = 0;
  virtual uint64_t connections_served() const = 0;
  // Serves an already connected socket whose peer skips the handshake and
  // sends requests at once (the kernel's NBD client), as export `name`
  // ("": the default). Takes the fd.
  virtual Status Adopt(int fd, const std::string& name = "") = 0;
  // More exports beside the default (`options.export_name`, `backend`): a
  // client asks for one by name (NBD_OPT_GO, NBD_OPT_EXPORT_NAME) and
  // NBD_OPT_LIST lists them all. `backend` is not owned and must stay
  // until RemoveExport returns. kBusy for a name taken.
  virtual Status AddExport(const std::string& name, BlockBackend* backend) = 0;
  // Takes export `name` away: no client gets it any more, and every
  // connection serving it is ended; returns once they have answered every
  // request they took. kNotFound for a name not exported (or the default).
  virtual Status RemoveExport(const std::string& name) = 0;
};

// Maximum payload of one request, as advertised. A larger read or write is
// answered EINVAL (a write's payload is read and dropped), as the protocol
// says; the connection goes on.
constexpr uint32_t kNbdMaxPayload = 32u << 20;

}  // namespace shim
