#include "shim/kernel_nbd.h"

#include <fcntl.h>
#include <linux/nbd-netlink.h>
#include <linux/nbd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "nbd_protocol.h"
#include "netlink.h"

namespace shim {

namespace {
constexpr uint8_t kNbdGenlVersion = 1;
// The device's request timer, in ms. A request the dead daemon had taken
// is sent again on the new connection when its timer fires after the
// reconnect, so this bounds how long the volume waits after `start` (the
// kernel's default is 30 s). With no NBD timeout set the timer never fails
// a request; it only logs one that is slow.
constexpr const char* kRequestTimerMs = "10000";
// How long Reconnect waits for the kernel to see the old connection die.
constexpr auto kReconnectWait = std::chrono::seconds(10);

std::string SysBlock(int index) { return "/sys/block/nbd" + std::to_string(index); }
std::string DevicePath(int index) { return "/dev/nbd" + std::to_string(index); }

// The first line of a sysfs attribute; empty when there is none.
std::string ReadAttribute(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Best effort: a kernel without the attribute keeps its default.
void WriteAttribute(const std::string& path, const char* value) {
  std::ofstream out(path);
  out << value;
}

void PutSocket(GenlMessage& m, int fd) {
  size_t sockets = m.BeginNest(NBD_ATTR_SOCKETS);
  size_t item = m.BeginNest(NBD_SOCK_ITEM);
  m.PutU32(NBD_SOCK_FD, static_cast<uint32_t>(fd));
  m.EndNest(item);
  m.EndNest(sockets);
}

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

constexpr uint64_t kKernelFlags = nbd::kTxHasFlags | nbd::kTxSendFlush | nbd::kTxSendFua |
                                 nbd::kTxSendTrim | nbd::kTxSendWriteZeroes;

// The older interface: find a free /dev/nbdN, configure it with ioctls and
// leave a thread in NBD_DO_IT for as long as it is connected.
Result<std::unique_ptr<KernelNbd>> KernelNbd::ConnectByIoctl(int kernel_end, uint64_t size_bytes,
                                                             uint32_t block_size) {
  for (int index = 0; index < 256; ++index) {
    std::string dev = "/dev/nbd" + std::to_string(index);
    if (access(("/sys/block/nbd" + std::to_string(index) + "/pid").c_str(), F_OK) == 0) continue;
    int fd = open(dev.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) break;
      continue;
    }
    if (ioctl(fd, NBD_SET_BLKSIZE, static_cast<unsigned long>(block_size)) != 0 ||
        ioctl(fd, NBD_SET_SIZE_BLOCKS, static_cast<unsigned long>(size_bytes / block_size)) != 0 ||
        ioctl(fd, NBD_SET_FLAGS, static_cast<unsigned long>(kKernelFlags)) != 0 ||
        ioctl(fd, NBD_SET_SOCK, static_cast<unsigned long>(kernel_end)) != 0) {
      ioctl(fd, NBD_CLEAR_SOCK);
      close(fd);
      continue;  // taken meanwhile, or refused: try the next one
    }
    auto k = std::unique_ptr<KernelNbd>(new KernelNbd(index, dev));
    k->ioctl_fd_ = fd;
    k->ioctl_thread_ = std::thread([fd] { ioctl(fd, NBD_DO_IT); });
    return k;
  }
  return Status::NotSupported("no free /dev/nbdN for the ioctl interface");
}

Result<std::unique_ptr<KernelNbd>> KernelNbd::Connect(NbdServer* server, uint64_t size_bytes,
                                                      uint32_t block_size, const std::string& backend,
                                                      const std::string& export_name) {
  // Netlink unless the kernel lacks it (or CACHECTL_NBD_IOCTL=1 asks for
  // the ioctls, which is how the guest tests reach that path).
  const char* force = std::getenv("CACHECTL_NBD_IOCTL");
  Result<uint16_t> family = force && std::string(force) == "1"
                                ? Result<uint16_t>(Status::NotFound("the ioctl interface was asked for"))
                                : NbdFamily();
  bool use_ioctl = !family.ok();
  if (use_ioctl && access("/dev/nbd0", F_OK) != 0 &&
      (std::system("modprobe nbd >/dev/null 2>&1") != 0 || access("/dev/nbd0", F_OK) != 0)) {
    return Status::NotSupported("the kernel has no NBD driver");
  }
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return Status::IoError(std::string("socketpair: ") + std::strerror(errno));
  }
  Status adopted = server->Adopt(pair[0], export_name);  // our end: requests straight away, no handshake
  if (!adopted.ok()) {
    close(pair[0]);
    close(pair[1]);
    return adopted;
  }
  if (use_ioctl) {
    auto k = ConnectByIoctl(pair[1], size_bytes, block_size);
    close(pair[1]);  // the kernel holds its own reference now
    return k;
  }
  GenlMessage m(family.value(), NBD_CMD_CONNECT, kNbdGenlVersion);
  m.PutU64(NBD_ATTR_SIZE_BYTES, size_bytes);
  m.PutU64(NBD_ATTR_BLOCK_SIZE_BYTES, block_size);
  m.PutU64(NBD_ATTR_SERVER_FLAGS, kKernelFlags);
  m.PutU64(NBD_ATTR_TIMEOUT, 0);  // the daemon answers or is gone: no request timeout
  m.PutU64(NBD_ATTR_DEAD_CONN_TIMEOUT, kReattachSeconds);  // gone: hold the I/O for the next one
  m.PutString(NBD_ATTR_BACKEND_IDENTIFIER, backend);
  PutSocket(m, pair[1]);
  Result<GenlAttrs> reply = GenlCall(m, "connecting a kernel NBD device");
  close(pair[1]);  // the kernel holds its own reference now
  if (!reply.ok()) return reply.status();
  auto it = reply->find(NBD_ATTR_INDEX);
  if (it == reply->end() || it->second.size() < 4) {
    return Status::IoError("the kernel did not say which NBD device it connected");
  }
  uint32_t raw_index;
  std::memcpy(&raw_index, it->second.data(), 4);
  int index = static_cast<int>(raw_index);
  WriteAttribute(SysBlock(index) + "/queue/io_timeout", kRequestTimerMs);
  return std::unique_ptr<KernelNbd>(new KernelNbd(index, DevicePath(index)));
}

// One NBD_CMD_RECONFIGURE with a new socket; our end when the kernel took
// the other. The kernel answers OK without taking it when the device has
// no dead connection to replace (it has not yet seen the old daemon's
// socket close): then our end finds its peer gone, and that is kBusy.
Result<int> KernelNbd::HandOverSocket(uint16_t family, int index, const std::string& backend) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return Status::IoError(std::string("socketpair: ") + std::strerror(errno));
  }
  GenlMessage m(family, NBD_CMD_RECONFIGURE, kNbdGenlVersion);
  m.PutU32(NBD_ATTR_INDEX, static_cast<uint32_t>(index));
  m.PutString(NBD_ATTR_BACKEND_IDENTIFIER, backend);
  m.PutU64(NBD_ATTR_DEAD_CONN_TIMEOUT, kReattachSeconds);  // a device of an older cachectl had none
  PutSocket(m, pair[1]);
  Result<GenlAttrs> reply = GenlCall(m, "handing " + DevicePath(index) + " to a new daemon");
  close(pair[1]);  // the kernel holds its own reference, if it took it
  pollfd ours{pair[0], POLLRDHUP, 0};
  if (reply.ok() && poll(&ours, 1, 0) == 1 && (ours.revents & (POLLRDHUP | POLLHUP))) {
    reply = Status::Busy(DevicePath(index) + " still has a live connection (is the daemon that served it running?)");
  }
  if (!reply.ok()) {
    close(pair[0]);
    return reply.status();
  }
  return pair[0];
}

Result<std::unique_ptr<KernelNbd>> KernelNbd::Reconnect(NbdServer* server, int index,
                                                        const std::string& backend,
                                                        const std::string& export_name) {
  const std::string dev = DevicePath(index);
  if (access((SysBlock(index) + "/pid").c_str(), F_OK) != 0) {
    return Status::NotFound(dev + " is no longer connected");
  }
  std::string serves = ReadAttribute(SysBlock(index) + "/backend");
  if (!serves.empty() && serves != backend) return Status::Busy(dev + " serves " + serves + " now");
  Result<uint16_t> family = NbdFamily();
  if (!family.ok()) return family.status();
  const auto deadline = std::chrono::steady_clock::now() + kReconnectWait;
  Result<int> ours = HandOverSocket(family.value(), index, backend);
  while (!ours.ok() && ours.status().code() == cachecore::StatusCode::kBusy &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ours = HandOverSocket(family.value(), index, backend);
  }
  if (!ours.ok()) return ours.status();
  Status adopted = server->Adopt(ours.value(), export_name);
  if (!adopted.ok()) {
    close(ours.value());  // the kernel goes on holding the I/O for another try
    return adopted;
  }
  WriteAttribute(SysBlock(index) + "/queue/io_timeout", kRequestTimerMs);
  return std::unique_ptr<KernelNbd>(new KernelNbd(index, dev));
}

Status KernelNbd::Disconnect() {
  if (!connected_) return Status::Ok();
  if (ioctl_fd_ >= 0) {
    ioctl(ioctl_fd_, NBD_DISCONNECT);
    if (ioctl_thread_.joinable()) ioctl_thread_.join();  // NBD_DO_IT returns
    ioctl(ioctl_fd_, NBD_CLEAR_SOCK);
    close(ioctl_fd_);
    ioctl_fd_ = -1;
    connected_ = false;
    return Status::Ok();
  }
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
