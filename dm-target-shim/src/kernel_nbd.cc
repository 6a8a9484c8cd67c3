#include "shim/kernel_nbd.h"

#include <linux/nbd-netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "nbd_protocol.h"
#include "netlink.h"

namespace shim {

namespace {
constexpr uint8_t kNbdGenlVersion = 1;

Result<uint16_t> NbdFamily() {
  Result<uint16_t> id = GenlFamily(NBD_GENL_FAMILY_NAME);
  if (id.ok()) return id;
  // The driver may be a module not loaded yet.
  if (std::system("modprobe nbd >/dev/null 2>&1") != 0) {
    return Status::NotSupported("the kernel has no NBD driver (modprobe nbd failed)");
  }
  id = GenlFamily(NBD_GENL_FAMILY_NAME);
  if (!id.ok()) return Status::NotSupported("the kernel has no NBD netlink interface");
  return id;
}
}  // namespace

Result<std::unique_ptr<KernelNbd>> KernelNbd::Connect(NbdServer* server, uint64_t size_bytes,
                                                      uint32_t block_size) {
  Result<uint16_t> family = NbdFamily();
  if (!family.ok()) return family.status();
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return Status::IoError(std::string("socketpair: ") + std::strerror(errno));
  }
  Status adopted = server->Adopt(pair[0]);  // our end: requests straight away, no handshake
  if (!adopted.ok()) {
    close(pair[0]);
    close(pair[1]);
    return adopted;
  }
  GenlMessage m(family.value(), NBD_CMD_CONNECT, kNbdGenlVersion);
  m.PutU64(NBD_ATTR_SIZE_BYTES, size_bytes);
  m.PutU64(NBD_ATTR_BLOCK_SIZE_BYTES, block_size);
  m.PutU64(NBD_ATTR_SERVER_FLAGS, nbd::kTxHasFlags | nbd::kTxSendFlush | nbd::kTxSendFua |
                                      nbd::kTxSendTrim | nbd::kTxSendWriteZeroes);
  m.PutU64(NBD_ATTR_TIMEOUT, 0);  // the daemon answers or is gone: no request timeout
  size_t sockets = m.BeginNest(NBD_ATTR_SOCKETS);
  size_t item = m.BeginNest(NBD_SOCK_ITEM);
  m.PutU32(NBD_SOCK_FD, static_cast<uint32_t>(pair[1]));
  m.EndNest(item);
  m.EndNest(sockets);
  Result<GenlAttrs> reply = GenlCall(m, "connecting a kernel NBD device");
  close(pair[1]);  // the kernel holds its own reference now
  if (!reply.ok()) return reply.status();
  auto it = reply->find(NBD_ATTR_INDEX);
  if (it == reply->end() || it->second.size() < 4) {
    return Status::IoError("the kernel did not say which NBD device it connected");
  }
  uint32_t index;
  std::memcpy(&index, it->second.data(), 4);
  return std::unique_ptr<KernelNbd>(new KernelNbd(static_cast<int>(index),
                                                  "/dev/nbd" + std::to_string(index)));
}

Status KernelNbd::Disconnect() {
  if (!connected_) return Status::Ok();
  Result<uint16_t> family = GenlFamily(NBD_GENL_FAMILY_NAME);
  if (!family.ok()) return family.status();
  GenlMessage m(family.value(), NBD_CMD_DISCONNECT, kNbdGenlVersion);
  m.PutU32(NBD_ATTR_INDEX, static_cast<uint32_t>(index_));
  Result<GenlAttrs> r = GenlCall(m, "disconnecting " + device_);
  if (!r.ok()) return r.status();
  connected_ = false;
  return Status::Ok();
}

KernelNbd::~KernelNbd() { (void)Disconnect(); }

}  // namespace shim
