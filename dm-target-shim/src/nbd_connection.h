// One NBD client connection: the handshake, then, over an asynchronous
// backend, a reactor (nbd_async.h). Otherwise a set of serving threads
// that take turns reading the next request from the socket (one at a
// time, under a lock), then each runs the request it read and sends its
// reply as it completes.
#pragma once

#include <sys/uio.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <string>
#include <vector>

#include "cachecore/devices/block_device.h"
#include "shim/block_backend.h"
#include "shim/nbd_server.h"

namespace shim {

struct NbdRequest;
class BufferBudget;
class TlsSession;

class NbdConnection;

// The exports a connection may serve, by the name its client asks for
// (the server's table). Thread-safe.
class ExportResolver {
 public:
  // The backend of export `name` ("": the default export), or nullptr when
  // there is none. With `binding` the connection is recorded as serving it
  // (a removal of the export ends it) in the same step.
  virtual BlockBackend* Resolve(const std::string& name, NbdConnection* binding) = 0;
  virtual std::vector<std::string> Names() = 0;

 protected:
  ~ExportResolver() = default;
};

class NbdConnection {
 public:
  // handshake: false for a peer that is already past it (the kernel):
  // `backend` is what it serves. With a handshake the client's choice of
  // export, through `exports`, says (`backend` is then unused).
  // options->worker_threads threads serve the connection once it is past
  // the handshake: that many requests run at once.
  // `budget` (the server's, for request buffers) must outlive it.
  // `tls` (not owned; null: none) makes the client start TLS first.
  NbdConnection(int fd, BlockBackend* backend, const NbdServerOptions* options, BufferBudget* budget,
                bool handshake = true, const NbdTls* tls = nullptr, ExportResolver* exports = nullptr);
  ~NbdConnection();
  // Runs the whole connection from the calling thread (and the serving
  // threads it starts); returns when it has ended and every request taken
  // has been answered.
  void Serve();
  // Ends the connection from another thread (server shutdown).
  void Interrupt();

 private:
  bool Handshake();
  // The handshake's reads and writes: through TLS once it has started.
  bool HandshakeRead(void* data, size_t len);
  bool HandshakeWrite(const iovec* iov, int count);
  bool StartTls(uint32_t option, const std::vector<uint8_t>& data);
  // The transmission phase on serve_fd_: the client's socket, or the inner
  // end of a socket pair relayed through TLS.
  void ServeTransmission();
  bool HandleOption(uint32_t option, const std::vector<uint8_t>& data, bool* go);
  bool SendOptionReply(uint32_t option, uint32_t type, const uint8_t* data, uint32_t len);
  bool SendExportInfo(uint32_t option);
  // Takes export `name` as the connection's (false: there is none).
  bool SelectExport(const std::string& name);
  uint16_t TransmissionFlags() const;
  // One serving thread: read a request, run it, answer; until the
  // connection ends.
  void ServeRequests();
  // Reads the next request into `r` (under read_mu_). False once the
  // connection has ended: a disconnect, EOF, or a stream it cannot follow.
  bool ReadRequest(NbdRequest& r);
  void Execute(NbdRequest& r);
  // Checks a request's range; 0 when it is fine, else the protocol errno.
  uint32_t CheckRange(uint16_t type, uint64_t offset, uint32_t length) const;
  void Reply(uint64_t handle, uint32_t error, const void* data, uint32_t len);

  int fd_;
  int serve_fd_;
  bool handshake_;
  const NbdTls* tls_;
  std::unique_ptr<TlsSession> tls_session_;
  BlockBackend* backend_;
  ExportResolver* exports_;
  const NbdServerOptions* options_;
  BufferBudget* budget_;
  std::mutex read_mu_;   // one reader of the socket at a time
  bool ended_ = false;   // under read_mu_: no more requests will be read
  std::mutex write_mu_;  // one reply on the socket at a time
};

}  // namespace shim
