// NBD over TLS (PSK) against libnbd's client: many requests in flight
// through the relay, both the engine's reactor path and the serving threads'
// path; a wrong key, an unknown user and a client that does not start TLS
// are refused; the server stops with TLS clients connected.
#include <gtest/gtest.h>
#include <libnbd.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <condition_variable>
#include <fstream>
#include <thread>
#include <mutex>
#include <random>
#include <vector>

#include "shim/block_backend.h"
#include "shim/engine_backend.h"
#include "shim/nbd_server.h"
#include "shim/nbd_tls.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

// A port free now on the loopback address.
int FreePort() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

std::string WriteKey(const std::string& path, const std::string& user, uint32_t seed) {
  std::mt19937 rng(seed);
  char hex[65];
  for (int i = 0; i < 32; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned>(rng() & 0xff));
  std::ofstream(path) << user << ":" << hex << "\n";
  chmod(path.c_str(), 0600);
  return path;
}

// A plain memory volume served by the serving threads (not asynchronous).
// Closed, its reads wait until it is opened again.
class MemoryBackend : public shim::BlockBackend {
 public:
  explicit MemoryBackend(uint64_t size) : data_(size) {}
  void Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      closed_ = false;
    }
    opened_.notify_all();
  }
  bool waiting() {
    std::lock_guard lock(mu_);
    return waiting_ > 0;
  }
  uint64_t size() const override { return data_.size(); }
  uint32_t preferred_block_size() const override { return 4096; }
  Status Read(uint64_t off, void* buf, uint64_t len) override {
    std::unique_lock lock(mu_);
    ++waiting_;
    opened_.wait(lock, [this] { return !closed_; });
    --waiting_;
    std::memcpy(buf, data_.data() + off, len);
    return Status::Ok();
  }
  Status Write(uint64_t off, const void* buf, uint64_t len, bool) override {
    std::lock_guard lock(mu_);
    std::memcpy(data_.data() + off, buf, len);
    return Status::Ok();
  }
  Status Flush() override { return Status::Ok(); }
  Status Trim(uint64_t, uint64_t) override { return Status::Ok(); }

 private:
  std::mutex mu_;
  std::condition_variable opened_;
  bool closed_ = false;
  int waiting_ = 0;
  std::vector<uint8_t> data_;
};

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

class NbdTlsTest : public ::testing::TestWithParam<bool> {  // true: the engine's reactor path
 protected:
  void SetUp() override {
    key_ = WriteKey(dir_.path() + "/keys.psk", "alice", 1);
    if (GetParam()) {
      RigOptions ro;
      ro.origin_size = 16 << 20;
      ro.cache_data_size = 4 << 20;
      rig_ = std::make_unique<EngineRig>(ro);
      EngineConfig c;
      c.mode = CacheMode::kWriteBack;
      c.line_size = 64 * 1024;
      ASSERT_TRUE(rig_->Create(c).ok());
      backend_ = std::make_unique<shim::EngineBackend>(&rig_->engine());
    } else {
      backend_ = std::make_unique<MemoryBackend>(16 << 20);
    }
    auto tls = shim::LoadNbdTlsPsk(key_);
    ASSERT_TRUE(tls.ok()) << tls.status().ToString();
    port_ = FreePort();
    shim::NbdServerOptions o;
    o.export_name = "vol";
    o.tcp_address = "127.0.0.1:" + std::to_string(port_);
    o.tls = tls.value();
    auto server = shim::NbdServer::Start(backend_.get(), o);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server.value());
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  // A connected client, or null with the reason in *error.
  nbd_handle* Connect(const std::string& user, const std::string& key, int tls, std::string* error) {
    nbd_handle* h = nbd_create();
    nbd_set_export_name(h, "vol");
    nbd_set_tls(h, tls);
    if (tls != LIBNBD_TLS_DISABLE) {
      nbd_set_tls_username(h, user.c_str());
      nbd_set_tls_psk_file(h, key.c_str());
    }
    if (nbd_connect_tcp(h, "127.0.0.1", std::to_string(port_).c_str()) == -1) {
      *error = nbd_get_error() ? nbd_get_error() : "?";
      nbd_close(h);
      return nullptr;
    }
    return h;
  }

  TempDir dir_;
  std::string key_;
  std::unique_ptr<EngineRig> rig_;
  std::unique_ptr<shim::BlockBackend> backend_;
  std::unique_ptr<shim::NbdServer> server_;
  int port_ = 0;
};

TEST_P(NbdTlsTest, ManyRequestsInFlightComeBackWhole) {
  std::string error;
  nbd_handle* h = Connect("alice", key_, LIBNBD_TLS_REQUIRE, &error);
  ASSERT_NE(h, nullptr) << error;
  EXPECT_EQ(nbd_get_tls_negotiated(h), 1);
  constexpr size_t kBlocks = 256, kBlock = 64 * 1024;
  std::vector<uint8_t> written(kBlocks * kBlock), read(kBlocks * kBlock);
  std::mt19937 rng(7);
  for (auto& b : written) b = static_cast<uint8_t>(rng());
  // Every write sent before any completes, then every read: the relay
  // carries both ways at once.
  for (size_t i = 0; i < kBlocks; ++i) {
    ASSERT_NE(nbd_aio_pwrite(h, written.data() + i * kBlock, kBlock, i * kBlock, NBD_NULL_COMPLETION, 0), -1)
        << nbd_get_error();
  }
  while (nbd_aio_in_flight(h) > 0) ASSERT_NE(nbd_poll(h, -1), -1) << nbd_get_error();
  for (size_t i = 0; i < kBlocks; ++i) {
    ASSERT_NE(nbd_aio_pread(h, read.data() + i * kBlock, kBlock, i * kBlock, NBD_NULL_COMPLETION, 0), -1)
        << nbd_get_error();
  }
  while (nbd_aio_in_flight(h) > 0) ASSERT_NE(nbd_poll(h, -1), -1) << nbd_get_error();
  EXPECT_TRUE(written == read);
  ASSERT_EQ(nbd_flush(h, 0), 0) << nbd_get_error();
  nbd_shutdown(h, 0);
  nbd_close(h);
}

TEST_P(NbdTlsTest, WrongKeysAndPlainClientsAreRefused) {
  std::string error;
  std::string wrong = WriteKey(dir_.path() + "/wrong.psk", "alice", 2);
  EXPECT_EQ(Connect("alice", wrong, LIBNBD_TLS_REQUIRE, &error), nullptr);
  std::string bob = WriteKey(dir_.path() + "/bob.psk", "bob", 1);
  EXPECT_EQ(Connect("bob", bob, LIBNBD_TLS_REQUIRE, &error), nullptr);
  EXPECT_EQ(Connect("", "", LIBNBD_TLS_DISABLE, &error), nullptr);
  EXPECT_NE(error.find("TLS"), std::string::npos) << error;
  // The server still serves the right key.
  nbd_handle* h = Connect("alice", key_, LIBNBD_TLS_REQUIRE, &error);
  ASSERT_NE(h, nullptr) << error;
  nbd_close(h);
}

TEST_P(NbdTlsTest, StopEndsConnectedTlsClients) {
  std::string error;
  nbd_handle* idle = Connect("alice", key_, LIBNBD_TLS_REQUIRE, &error);
  ASSERT_NE(idle, nullptr) << error;
  nbd_handle* busy = Connect("alice", key_, LIBNBD_TLS_REQUIRE, &error);
  ASSERT_NE(busy, nullptr) << error;
  std::vector<uint8_t> buf(1 << 20, 0x5a);
  for (int i = 0; i < 8; ++i) {
    ASSERT_NE(nbd_aio_pwrite(busy, buf.data(), buf.size(), uint64_t(i) << 20, NBD_NULL_COMPLETION, 0), -1);
  }
  server_->Stop();  // returns: every relay and session has ended
  server_.reset();
  char byte;
  EXPECT_EQ(nbd_pread(idle, &byte, 1, 0, 0), -1);
  nbd_close(idle);
  nbd_close(busy);
}

// Stop shuts the client's socket while a request waits in the backend: the
// relay, with nothing to send either way, must wait, not spin on the shut
// socket's POLLHUP (it did, a core for as long as the request took).
TEST(NbdTlsRelayTest, WaitsWithoutSpinningWhileARequestIsInTheBackend) {
  TempDir dir;
  std::string key = WriteKey(dir.path() + "/keys.psk", "alice", 1);
  MemoryBackend backend(1 << 20);
  auto tls = shim::LoadNbdTlsPsk(key);
  ASSERT_TRUE(tls.ok());
  const int port = FreePort();
  shim::NbdServerOptions o;
  o.export_name = "vol";
  o.tcp_address = "127.0.0.1:" + std::to_string(port);
  o.tls = tls.value();
  o.worker_threads = 2;
  auto server = shim::NbdServer::Start(&backend, o);
  ASSERT_TRUE(server.ok());
  nbd_handle* h = nbd_create();
  nbd_set_export_name(h, "vol");
  nbd_set_tls(h, LIBNBD_TLS_REQUIRE);
  nbd_set_tls_username(h, "alice");
  nbd_set_tls_psk_file(h, key.c_str());
  ASSERT_EQ(nbd_connect_tcp(h, "127.0.0.1", std::to_string(port).c_str()), 0) << nbd_get_error();
  backend.Close();
  char buf[4096];
  ASSERT_NE(nbd_aio_pread(h, buf, sizeof(buf), 0, NBD_NULL_COMPLETION, 0), -1);
  while (!backend.waiting()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread stopper([&] { server.value()->Stop(); });  // waits for the read
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double before = CpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double used = CpuSeconds() - before;
  backend.Open();
  stopper.join();
  nbd_close(h);
  EXPECT_LT(used, 0.25) << "seconds of CPU in half a second of waiting: something spins";
}

INSTANTIATE_TEST_SUITE_P(Paths, NbdTlsTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "EngineReactor" : "ServingThreads"; });

}  // namespace
}  // namespace cachecore::testing
