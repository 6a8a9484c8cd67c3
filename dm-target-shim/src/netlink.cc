#include "netlink.h"

#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace shim {

using cachecore::Result;
using cachecore::Status;

namespace {
size_t Align4(size_t n) { return (n + 3) & ~size_t{3}; }
// The kernel answers at once; a reply that does not come is reported, not
// waited for forever.
constexpr int kReplySeconds = 30;
}  // namespace

GenlMessage::GenlMessage(uint16_t family, uint8_t command, uint8_t version)
    : buf_(NLMSG_HDRLEN + GENL_HDRLEN, 0) {
  auto* nl = reinterpret_cast<nlmsghdr*>(buf_.data());
  nl->nlmsg_type = family;
  nl->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  nl->nlmsg_seq = 1;
  auto* g = reinterpret_cast<genlmsghdr*>(buf_.data() + NLMSG_HDRLEN);
  g->cmd = command;
  g->version = version;
}

void GenlMessage::Put(uint16_t type, const void* data, size_t len) {
  size_t at = buf_.size();
  buf_.resize(at + Align4(NLA_HDRLEN + len), 0);
  auto* a = reinterpret_cast<nlattr*>(buf_.data() + at);
  a->nla_len = static_cast<uint16_t>(NLA_HDRLEN + len);
  a->nla_type = type;
  std::memcpy(buf_.data() + at + NLA_HDRLEN, data, len);
}

size_t GenlMessage::BeginNest(uint16_t type) {
  size_t at = buf_.size();
  Put(type | NLA_F_NESTED, nullptr, 0);
  return at;
}

void GenlMessage::EndNest(size_t at) {
  reinterpret_cast<nlattr*>(buf_.data() + at)->nla_len = static_cast<uint16_t>(buf_.size() - at);
}

std::vector<uint8_t>& GenlMessage::bytes() {
  reinterpret_cast<nlmsghdr*>(buf_.data())->nlmsg_len = static_cast<uint32_t>(buf_.size());
  return buf_;
}

Result<GenlAttrs> GenlCall(GenlMessage& msg, const std::string& what) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
  if (fd < 0) return Status::NotSupported("netlink: " + std::string(std::strerror(errno)));
  timeval patience{kReplySeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::vector<uint8_t>& out = msg.bytes();
  if (sendto(fd, out.data(), out.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    Status s = Status::IoError(what + ": netlink send: " + std::strerror(errno));
    close(fd);
    return s;
  }
  GenlAttrs attrs;
  std::vector<uint8_t> in(65536);
  while (true) {
    ssize_t n = recv(fd, in.data(), in.size(), 0);
    if (n < 0) {
      Status s = errno == EAGAIN || errno == EWOULDBLOCK
                     ? Status::IoError(what + ": the kernel did not answer in " +
                                       std::to_string(kReplySeconds) + " s")
                     : Status::IoError(what + ": netlink receive: " + std::strerror(errno));
      close(fd);
      return s;
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(in.data()); NLMSG_OK(h, static_cast<size_t>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_ERROR) {
        int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
        close(fd);
        if (err == 0) return attrs;  // the acknowledgement ends the exchange
        return Status::IoError(what + ": " + std::strerror(err));
      }
      auto* payload = static_cast<uint8_t*>(NLMSG_DATA(h)) + GENL_HDRLEN;
      size_t left = h->nlmsg_len - NLMSG_HDRLEN - GENL_HDRLEN;
      while (left >= NLA_HDRLEN) {
        auto* a = reinterpret_cast<nlattr*>(payload);
        if (a->nla_len < NLA_HDRLEN || a->nla_len > left) break;
        attrs[a->nla_type & NLA_TYPE_MASK] =
            std::string(reinterpret_cast<char*>(payload + NLA_HDRLEN), a->nla_len - NLA_HDRLEN);
        size_t step = Align4(a->nla_len);
        if (step > left) break;
        payload += step;
        left -= step;
      }
    }
  }
}

Result<uint16_t> GenlFamily(const std::string& name) {
  GenlMessage m(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1);
  m.PutString(CTRL_ATTR_FAMILY_NAME, name);
  Result<GenlAttrs> r = GenlCall(m, "looking up " + name);
  if (!r.ok()) return Status::NotFound("the kernel has no " + name + " netlink family");
  auto it = r->find(CTRL_ATTR_FAMILY_ID);
  if (it == r->end() || it->second.size() < 2) return Status::NotFound("no id for " + name);
  uint16_t id;
  std::memcpy(&id, it->second.data(), 2);
  return id;
}

}  // namespace shim
