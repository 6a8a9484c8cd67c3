// TLS for the NBD server's TCP clients (GnuTLS): the credentials, loaded
// once when the server starts, in the layouts nbdkit and qemu-nbd use, so
// that their clients' key files and certificate directories serve as they are.
//
//   PSK:   a file of "username:hexkey" lines (psktool -u alice -p keys.psk).
//   X.509: a directory with ca-cert.pem, server-cert.pem, server-key.pem
//          (and ca-crl.pem when there is one). Clients must present a
//          certificate the CA signed (as qemu-nbd's verify-peer default).
//
// A client of a TLS server must send NBD_OPT_STARTTLS before anything else
// (nbds:// URIs do); the rest of its handshake and all its requests go
// through the TLS session.
#pragma once

#include <memory>
#include <string>

#include "cachecore/base/status.h"

namespace shim {

class NbdTls {
 public:
  virtual ~NbdTls() = default;
  // "PSK file /etc/..." or "X.509 certificates in /etc/...": for logs and stats.
  virtual std::string Describe() const = 0;
};

// Reads the PSK file: NotFound when it cannot be read, InvalidArgument
// naming the file when it holds no valid "username:hexkey" line or when
// users other than its owner's group may read it (a key anyone reads
// protects nothing).
cachecore::Result<std::shared_ptr<const NbdTls>> LoadNbdTlsPsk(const std::string& file);
// Reads the certificate directory: NotFound naming a missing file,
// InvalidArgument naming a file GnuTLS cannot use or a private key others
// may read.
cachecore::Result<std::shared_ptr<const NbdTls>> LoadNbdTlsCertificates(const std::string& dir);

}  // namespace shim
