// GnuTLS credentials (PSK, X.509) and the server side of one session: the
// handshake, blocking reads and writes for the rest of the NBD handshake,
// and the relay that carries the transmission phase.
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <vector>

#include "shim/nbd_tls.h"
#include "tls_session.h"

namespace shim {

using cachecore::Result;
using cachecore::Status;

namespace {

// The session's priorities: GnuTLS's NORMAL, and where the CPU has AES
// instructions, ChaCha20 last and the server's order deciding. A PSK of
// SHA-256 (psktool's) rules out AES-256-GCM-SHA384 under TLS 1.3, and
// clients list ChaCha20 next, which without this is what they get: several
// times the CPU of AES-128-GCM with AES-NI, for every byte.
std::string Priorities(const char* extra) {
  bool aes = false;
#if defined(__x86_64__) || defined(__i386__)
  aes = __builtin_cpu_supports("aes");
#elif defined(__aarch64__)
  aes = (getauxval(AT_HWCAP) & HWCAP_AES) != 0;
#endif
  std::string p = "NORMAL";
  if (aes) p += ":-CHACHA20-POLY1305:+CHACHA20-POLY1305:%SERVER_PRECEDENCE";
  return p + extra;
}

// What a session needs of its server's credentials.
class TlsCredentials : public NbdTls {
 public:
  virtual int Apply(gnutls_session_t s) const = 0;
};

// A key file or directory must exist, and a private key must not be
// readable by others than its owner and group.
Status CheckSecret(const std::string& path, bool secret) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return Status::NotFound("cannot read " + path + ": " + std::strerror(errno));
  if (secret && (st.st_mode & S_IROTH)) {
    return Status::InvalidArgument(path + " is readable by every user: a key anyone reads protects nothing "
                                          "(chmod o-r " + path + ")");
  }
  return Status::Ok();
}

Status GnutlsError(const std::string& what, int rc) {
  return Status::InvalidArgument(what + ": " + gnutls_strerror(rc));
}

class PskCredentials : public TlsCredentials {
 public:
  ~PskCredentials() override {
    if (cred_) gnutls_psk_free_server_credentials(cred_);
  }

  Status Load(const std::string& file) {
    file_ = file;
    if (Status s = CheckSecret(file, true); !s.ok()) return s;
    std::ifstream in(file);
    if (!in) return Status::NotFound("cannot read " + file);
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      if (line.empty()) continue;
      size_t colon = line.find(':');
      std::vector<uint8_t> key;
      if (colon == 0 || colon == std::string::npos || !FromHex(line.substr(colon + 1), &key)) {
        return Status::InvalidArgument(file + " line " + std::to_string(number) +
                                       ": not 'username:hexkey' (psktool -u NAME -p " + file + " writes one)");
      }
      keys_[line.substr(0, colon)] = key;
    }
    if (keys_.empty()) return Status::InvalidArgument(file + " holds no key (psktool -u NAME -p " + file + ")");
    int rc = gnutls_psk_allocate_server_credentials(&cred_);
    if (rc < 0) return GnutlsError("GnuTLS PSK credentials", rc);
    gnutls_psk_set_server_credentials_function(cred_, &PskCredentials::Lookup);
    (void)gnutls_psk_set_server_known_dh_params(cred_, GNUTLS_SEC_PARAM_MEDIUM);  // for DHE-PSK
    return Status::Ok();
  }

  std::string Describe() const override { return "TLS with the PSK file " + file_; }

  int Apply(gnutls_session_t s) const override {
    gnutls_session_set_ptr(s, const_cast<PskCredentials*>(this));
    static const std::string kPriorities = Priorities(":+ECDHE-PSK:+DHE-PSK:+PSK");
    int rc = gnutls_priority_set_direct(s, kPriorities.c_str(), nullptr);
    return rc < 0 ? rc : gnutls_credentials_set(s, GNUTLS_CRD_PSK, cred_);
  }

 private:
  static bool FromHex(const std::string& hex, std::vector<uint8_t>* out) {
    if (hex.empty() || hex.size() % 2 != 0) return false;
    for (size_t i = 0; i < hex.size(); i += 2) {
      char pair[3] = {hex[i], hex[i + 1], 0};
      char* end = nullptr;
      unsigned long v = std::strtoul(pair, &end, 16);
      if (*end != 0 || !std::isxdigit(static_cast<unsigned char>(pair[0]))) return false;
      out->push_back(static_cast<uint8_t>(v));
    }
    return true;
  }

  // GnuTLS asks for the key of the username a client names; -1 refuses it.
  static int Lookup(gnutls_session_t s, const char* username, gnutls_datum_t* key) {
    auto* self = static_cast<const PskCredentials*>(gnutls_session_get_ptr(s));
    auto it = self->keys_.find(username);
    if (it == self->keys_.end()) return -1;
    key->data = static_cast<unsigned char*>(gnutls_malloc(it->second.size()));
    if (key->data == nullptr) return -1;
    std::memcpy(key->data, it->second.data(), it->second.size());
    key->size = static_cast<unsigned>(it->second.size());
    return 0;
  }

  std::string file_;
  std::map<std::string, std::vector<uint8_t>> keys_;
  gnutls_psk_server_credentials_t cred_ = nullptr;
};

class X509Credentials : public TlsCredentials {
 public:
  ~X509Credentials() override {
    if (cred_) gnutls_certificate_free_credentials(cred_);
  }

  Status Load(const std::string& dir) {
    dir_ = dir;
    const std::string ca = dir + "/ca-cert.pem", crl = dir + "/ca-crl.pem", cert = dir + "/server-cert.pem",
                      key = dir + "/server-key.pem";
    for (const std::string& f : {ca, cert, key}) {
      if (Status s = CheckSecret(f, f == key); !s.ok()) return s;
    }
    int rc = gnutls_certificate_allocate_credentials(&cred_);
    if (rc < 0) return GnutlsError("GnuTLS certificate credentials", rc);
    rc = gnutls_certificate_set_x509_trust_file(cred_, ca.c_str(), GNUTLS_X509_FMT_PEM);
    if (rc <= 0) return rc < 0 ? GnutlsError(ca, rc) : Status::InvalidArgument(ca + " holds no certificate");
    if (access(crl.c_str(), F_OK) == 0) {
      rc = gnutls_certificate_set_x509_crl_file(cred_, crl.c_str(), GNUTLS_X509_FMT_PEM);
      if (rc < 0) return GnutlsError(crl, rc);
    }
    rc = gnutls_certificate_set_x509_key_file(cred_, cert.c_str(), key.c_str(), GNUTLS_X509_FMT_PEM);
    if (rc < 0) return GnutlsError(cert + " with " + key, rc);
    (void)gnutls_certificate_set_known_dh_params(cred_, GNUTLS_SEC_PARAM_MEDIUM);
    return Status::Ok();
  }

  std::string Describe() const override { return "TLS with the X.509 certificates in " + dir_; }

  // Clients must present a certificate the CA signed: the handshake fails
  // otherwise (a certificate is what identifies a client here).
  int Apply(gnutls_session_t s) const override {
    static const std::string kPriorities = Priorities("");
    int rc = gnutls_priority_set_direct(s, kPriorities.c_str(), nullptr);
    if (rc < 0) return rc;
    rc = gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred_);
    if (rc < 0) return rc;
    gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_verify_cert(s, nullptr, 0);
    return 0;
  }

 private:
  std::string dir_;
  gnutls_certificate_credentials_t cred_ = nullptr;
};

bool Retry(ssize_t rc) { return rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED; }

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

Result<std::shared_ptr<const NbdTls>> LoadNbdTlsPsk(const std::string& file) {
  auto creds = std::make_shared<PskCredentials>();
  if (Status s = creds->Load(file); !s.ok()) return s;
  return std::shared_ptr<const NbdTls>(creds);
}

Result<std::shared_ptr<const NbdTls>> LoadNbdTlsCertificates(const std::string& dir) {
  auto creds = std::make_shared<X509Credentials>();
  if (Status s = creds->Load(dir); !s.ok()) return s;
  return std::shared_ptr<const NbdTls>(creds);
}

struct TlsSession::Impl {
  gnutls_session_t session = nullptr;
  int fd = -1;
  ~Impl() {
    if (session) gnutls_deinit(session);
  }
};

TlsSession::TlsSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsSession::~TlsSession() = default;

Result<std::unique_ptr<TlsSession>> TlsSession::Accept(const NbdTls& tls, int fd) {
  auto impl = std::make_unique<Impl>();
  impl->fd = fd;
  // GNUTLS_NO_SIGNAL: a client that hung up must not kill the process with SIGPIPE.
  int rc = gnutls_init(&impl->session, GNUTLS_SERVER | GNUTLS_NO_SIGNAL);
  if (rc < 0) return GnutlsError("TLS session", rc);
  rc = static_cast<const TlsCredentials&>(tls).Apply(impl->session);
  if (rc < 0) return GnutlsError("TLS session", rc);
  gnutls_transport_set_int(impl->session, fd);
  do {
    rc = gnutls_handshake(impl->session);
  } while (rc < 0 && !gnutls_error_is_fatal(rc));
  if (rc < 0) return GnutlsError("TLS handshake", rc);
  return std::unique_ptr<TlsSession>(new TlsSession(std::move(impl)));
}

bool TlsSession::ReadFull(void* data, size_t len) {
  auto* p = static_cast<uint8_t*>(data);
  while (len > 0) {
    ssize_t n = gnutls_record_recv(impl_->session, p, len);
    if (Retry(n)) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool TlsSession::WriteFull(const void* data, size_t len) {
  auto* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    ssize_t n = gnutls_record_send(impl_->session, p, len);
    if (Retry(n)) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

namespace {
// One direction of the relay: bytes taken from one side, not yet given to
// the other.
struct Pending {
  std::vector<uint8_t> data;
  size_t begin = 0, end = 0;
  explicit Pending(size_t size) : data(size) {}
  bool empty() const { return begin == end; }
  void Fill(ssize_t n) { begin = 0, end = static_cast<size_t>(n); }
  void Clear() { begin = end = 0; }
};
constexpr size_t kRelayBuffer = 256 << 10;

bool WouldBlock() { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

// The relay's state. Each side is tried only when it may be ready (a call
// that would block is not repeated until poll says so): one relayed
// record costs its own system calls and no more.
class Relayer {
 public:
  Relayer(gnutls_session_t s, int fd, int inner) : s_(s), fd_(fd), inner_(inner) {}

  void Run() {
    while (true) {
      bool progress = FromClient();
      progress |= ToInner();
      if (!client_sends_ && down_.empty() && !inner_told_) {
        shutdown(inner_, SHUT_WR);  // the session sees the client's end of stream
        inner_told_ = progress = true;
      }
      progress |= FromInner();
      progress |= ToClient();
      if (!inner_sends_ && up_.empty()) break;  // the session has ended and all it said is sent
      if (!progress && !Wait()) break;
    }
    if (client_takes_) (void)gnutls_bye(s_, GNUTLS_SHUT_WR);  // one try: the socket does not block
    shutdown(fd_, SHUT_RDWR);
  }

 private:
  // What a GnuTLS call that returned E_AGAIN waits for on the socket.
  short TlsWait() const { return gnutls_record_get_direction(s_) ? POLLOUT : POLLIN; }

  bool FromClient() {
    if (!client_sends_ || !down_.empty()) return false;
    if (recv_wait_ != 0 && gnutls_record_check_pending(s_) == 0) return false;
    recv_wait_ = 0;
    ssize_t n = gnutls_record_recv(s_, down_.data.data(), down_.data.size());
    if (n > 0) return down_.Fill(n), true;
    if (Retry(n)) return recv_wait_ = TlsWait(), false;
    client_sends_ = false;  // its end of stream, or a broken session
    return true;
  }

  bool ToInner() {
    if (down_.empty() || !inner_writable_) return false;
    ssize_t n = send(inner_, down_.data.data() + down_.begin, down_.end - down_.begin, MSG_NOSIGNAL);
    if (n > 0) return down_.begin += static_cast<size_t>(n), true;
    if (n < 0 && WouldBlock()) return inner_writable_ = false, false;
    down_.Clear();  // the NBD session is gone
    client_sends_ = false;
    return true;
  }

  bool FromInner() {
    if (!inner_sends_ || !up_.empty() || !inner_readable_) return false;
    ssize_t n = recv(inner_, up_.data.data(), up_.data.size(), 0);
    if (n > 0) return up_.Fill(n), true;
    if (n < 0 && WouldBlock()) return inner_readable_ = false, false;
    inner_sends_ = false;
    return true;
  }

  // A client that is gone gets nothing, but the session is still read to
  // its end: it must not wait for ever on a full socket.
  bool ToClient() {
    if (up_.empty()) return false;
    if (!client_takes_) return up_.Clear(), true;
    if (send_wait_ != 0) return false;
    ssize_t n = gnutls_record_send(s_, up_.data.data() + up_.begin, up_.end - up_.begin);
    if (n > 0) return up_.begin += static_cast<size_t>(n), true;
    if (Retry(n)) return send_wait_ = TlsWait(), false;  // retried with the same bytes, as GnuTLS needs
    up_.Clear();
    client_takes_ = false;
    return true;
  }

  // Waits until a side that blocked may go on. False when poll fails.
  bool Wait() {
    short want_fd = (client_sends_ && down_.empty() ? recv_wait_ : 0) |
                    (!up_.empty() && client_takes_ ? send_wait_ : 0);
    short want_inner = (!down_.empty() && !inner_writable_ ? POLLOUT : 0) |
                       (inner_sends_ && up_.empty() && !inner_readable_ ? POLLIN : 0);
    // A side nothing is wanted of is left out: a socket that was shut down
    // reports POLLHUP whatever is asked, and would make this loop spin.
    pollfd fds[2] = {{want_fd ? fd_ : -1, want_fd, 0}, {want_inner ? inner_ : -1, want_inner, 0}};
    if (poll(fds, 2, -1) < 0) return errno == EINTR;
    const short client = fds[0].revents, inner = fds[1].revents;
    if (client & (POLLHUP | POLLERR)) client_sends_ = client_takes_ = false;  // reset, or Interrupt
    if (client & recv_wait_) recv_wait_ = 0;
    if (client & send_wait_) send_wait_ = 0;
    if (inner & (POLLIN | POLLHUP | POLLERR)) inner_readable_ = true;
    if (inner & (POLLOUT | POLLHUP | POLLERR)) inner_writable_ = true;
    return true;
  }

  gnutls_session_t s_;
  const int fd_, inner_;
  Pending down_{kRelayBuffer}, up_{kRelayBuffer};  // client to inner, inner to client
  bool client_sends_ = true, client_takes_ = true, inner_sends_ = true, inner_told_ = false;
  bool inner_readable_ = true, inner_writable_ = true;
  short recv_wait_ = 0, send_wait_ = 0;
};
}  // namespace

void TlsSession::Relay(int inner) {
  SetNonBlocking(impl_->fd);
  SetNonBlocking(inner);
  Relayer(impl_->session, impl_->fd, inner).Run();
}

}  // namespace shim
