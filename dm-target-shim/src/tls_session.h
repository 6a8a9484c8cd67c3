// One TLS session of an NBD client (GnuTLS, server side): the handshake
// after NBD_OPT_STARTTLS, the rest of the NBD handshake through it, then a
// relay between the client's TCP socket and a socket pair whose other end
// the NBD session serves as if it were a plain connection.
#pragma once

#include <cstddef>
#include <memory>

#include "cachecore/base/status.h"
#include "shim/nbd_tls.h"

namespace shim {

class TlsSession {
 public:
  // Runs the TLS handshake on `fd` (blocking): Ok with the session, or why
  // the client was refused (a wrong key, no certificate, a protocol error).
  static cachecore::Result<std::unique_ptr<TlsSession>> Accept(const NbdTls& tls, int fd);
  ~TlsSession();

  // Whole reads and writes through the session (blocking), for the rest of
  // the NBD handshake. False once the session has failed or ended.
  bool ReadFull(void* data, size_t len);
  bool WriteFull(const void* data, size_t len);

  // Carries bytes both ways between the client (`fd`, set non-blocking)
  // and `inner` until both directions have ended: the client's end of
  // stream reaches `inner` as a half-close, and once `inner` has closed,
  // the client's connection is shut down. All GnuTLS calls of the session
  // are made by this one thread (GnuTLS may not receive and send on one
  // session from two threads while a TLS 1.3 key update can come).
  void Relay(int inner);

 private:
  struct Impl;
  explicit TlsSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shim
