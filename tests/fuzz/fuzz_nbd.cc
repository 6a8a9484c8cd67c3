// Fuzz target: an NBD client's whole byte stream (handshake, options,
// requests) against the server, over a socketpair, with a memory backend.
// The server must answer or hang up, never crash, never touch memory it
// should not.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "nbd_async.h"
#include "nbd_connection.h"

namespace {

class MemoryBackend : public shim::BlockBackend {
 public:
  uint64_t size() const override { return data_.size(); }
  uint32_t preferred_block_size() const override { return 4096; }
  shim::Status Read(uint64_t off, void* buf, uint64_t len) override {
    std::memcpy(buf, data_.data() + off, len);
    return shim::Status::Ok();
  }
  shim::Status Write(uint64_t off, const void* buf, uint64_t len, bool) override {
    std::memcpy(data_.data() + off, buf, len);
    return shim::Status::Ok();
  }
  shim::Status Flush() override { return shim::Status::Ok(); }
  shim::Status Trim(uint64_t off, uint64_t len) override {
    std::memset(data_.data() + off, 0, len);
    return shim::Status::Ok();
  }

 private:
  std::vector<uint8_t> data_ = std::vector<uint8_t>(1 << 20);
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static MemoryBackend backend;
  static shim::NbdServerOptions options = [] {
    shim::NbdServerOptions o;
    o.export_name = "fuzz";
    o.worker_threads = 2;
    return o;
  }();
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return 0;
  // The client side: send the input, then read and drop every reply.
  std::thread client([fd = pair[1], data, size] {
    size_t sent = 0;
    while (sent < size) {
      ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    shutdown(fd, SHUT_WR);
    char sink[4096];
    while (read(fd, sink, sizeof(sink)) > 0) {
    }
    close(fd);
  });
  {
    // A stream that starts like a request is served as the kernel's client
    // is (no handshake): both paths get fuzzed.
    static const uint8_t kRequestMagic[4] = {0x25, 0x60, 0x95, 0x13};
    bool handshake = size < 4 || std::memcmp(data, kRequestMagic, 4) != 0;
    static shim::BufferBudget budget(options.buffer_bytes);
    auto conn = std::make_shared<shim::NbdConnection>(pair[0], &backend, &options, &budget, handshake);
    conn->Serve();
  }  // the connection closes its end here; the client sees EOF
  client.join();
  return 0;
}
