#include "shim/socket_io.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace shim {

using cachecore::Result;
using cachecore::Status;

namespace {
Status Errno(const std::string& what) { return Status::IoError(what + ": " + std::strerror(errno)); }

Result<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("socket path is too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}
}  // namespace

bool ReadFull(int fd, void* buf, size_t len) {
  auto* p = static_cast<uint8_t*>(buf);
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool WriteFull(int fd, const void* buf, size_t len) {
  iovec iov{const_cast<void*>(buf), len};
  return WriteVecFull(fd, &iov, 1);
}

bool WriteVecFull(int fd, iovec* iov, int count) {
  while (count > 0) {
    // MSG_NOSIGNAL: a client that hung up must not kill the daemon with SIGPIPE.
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = writev(fd, iov, count);  // a pipe
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    auto left = static_cast<size_t>(n);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

Result<int> ListenUnix(const std::string& path, unsigned mode, int gid) {
  Result<sockaddr_un> addr = UnixAddress(path);
  if (!addr.ok()) return addr.status();
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  // Bind with a umask that keeps the socket private until chmod says more.
  mode_t old = umask(0177);
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr.value()), sizeof(sockaddr_un));
  umask(old);
  if (rc == 0 && gid >= 0) rc = chown(path.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(gid));
  if (rc != 0 || chmod(path.c_str(), mode) != 0 || listen(fd, 64) != 0) {
    Status s = Errno("cannot listen on " + path);
    close(fd);
    return s;
  }
  return fd;
}

namespace {
// "host:port" (an IPv6 host in brackets) to the address to listen on; the
// caller frees it (freeaddrinfo).
Result<addrinfo*> ResolveListenAddress(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("TCP address must be host:port");
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) return Status::InvalidArgument(address + ": " + gai_strerror(rc));
  return res;
}
}  // namespace

Result<bool> IsLoopbackTcp(const std::string& address) {
  Result<addrinfo*> resolved = ResolveListenAddress(address);
  if (!resolved.ok()) return resolved.status();
  const addrinfo* a = resolved.value();
  bool loopback = false;
  if (a->ai_family == AF_INET) {
    loopback = (ntohl(reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
  } else if (a->ai_family == AF_INET6) {
    loopback = IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr);
  }
  freeaddrinfo(resolved.value());
  return loopback;
}

Result<int> ListenTcp(const std::string& address) {
  Result<addrinfo*> resolved = ResolveListenAddress(address);
  if (!resolved.ok()) return resolved.status();
  addrinfo* res = resolved.value();
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    Status s = Errno("cannot listen on " + address);
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return s;
  }
  freeaddrinfo(res);
  return fd;
}

Result<int> ConnectUnix(const std::string& path) {
  Result<sockaddr_un> addr = UnixAddress(path);
  if (!addr.ok()) return addr.status();
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr.value()), sizeof(sockaddr_un)) != 0) {
    Status s = errno == ENOENT ? Status::NotFound(path + " does not exist")
               : errno == ECONNREFUSED ? Status::NotFound(path + ": nothing is listening (stale socket)")
                                       : Errno("cannot connect to " + path);
    close(fd);
    return s;
  }
  return fd;
}

}  // namespace shim
