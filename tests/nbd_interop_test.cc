// The NBD front end against clients no one here wrote (libnbd's nbdinfo and
// nbdsh, qemu-img and qemu-io, fio's nbd engine with verify), serving the
// real engine on real files through libaio; and against a raw client that
// sends what a broken or hostile client would.
//
// The tools are installed by scripts/setup.sh. A missing tool fails the
// test (loudly); it is never skipped.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "cachecore/devices/aio_device.h"
#include "shim/block_backend.h"
#include "shim/engine_backend.h"
#include "shim/nbd_server.h"
#include "support/block_io.h"
#include "support/engine_rig.h"
#include "../dm-target-shim/src/nbd_protocol.h"
#include "shim/socket_io.h"

namespace cachecore::testing {
namespace {

namespace nbd = shim::nbd;

constexpr uint64_t kOriginSize = 64 << 20;

// Runs a shell command; returns its exit status and what it printed.
std::pair<int, std::string> Shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), p)) out += buf.data();
  int rc = pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

void RequireTool(const char* tool) {
  auto [rc, out] = Shell(std::string("command -v ") + tool);
  ASSERT_EQ(rc, 0) << tool << " is not installed: run scripts/setup.sh (this test never skips)";
}

std::string MakeFile(const std::string& path, uint64_t size) {
  int fd = open(path.c_str(), O_CREAT | O_RDWR, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  close(fd);
  return path;
}

class NbdInteropTest : public ::testing::TestWithParam<CacheMode> {
 protected:
  void SetUp() override {
    auto origin = OpenAioDevice(MakeFile(dir_.path() + "/origin.img", kOriginSize));
    auto cache = OpenAioDevice(MakeFile(dir_.path() + "/cache.img", 32 << 20));
    ASSERT_TRUE(origin.ok() && cache.ok());
    origin_ = std::move(origin.value());
    cache_ = std::move(cache.value());
    MetadataOptions mo;
    mo.create_if_missing = true;
    auto store = MetadataStore::Open(dir_.path() + "/metadata", mo);
    ASSERT_TRUE(store.ok());
    store_ = std::move(store.value());
    EngineConfig c;
    c.mode = GetParam();
    c.line_size = 64 * 1024;
    auto engine = Engine::Create({origin_.get(), cache_.get(), store_.get()}, c, Replace::kNothing);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine.value());
    backend_ = std::make_unique<shim::EngineBackend>(engine_.get());
    socket_ = dir_.path() + "/nbd";
    shim::NbdServerOptions o;
    o.export_name = "testvol";
    o.unix_path = socket_;
    auto server = shim::NbdServer::Start(backend_.get(), o);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server.value());
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (engine_) {
      EXPECT_TRUE(engine_->Detach().ok());
    }
  }
  std::string Uri() const { return "nbd+unix:///testvol?socket=" + socket_; }

  TempDir dir_;
  std::unique_ptr<BlockDevice> origin_, cache_;
  std::unique_ptr<MetadataStore> store_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<shim::EngineBackend> backend_;
  std::unique_ptr<shim::NbdServer> server_;
  std::string socket_;
};

TEST_P(NbdInteropTest, NbdinfoSeesSizeAndFlags) {
  RequireTool("nbdinfo");
  auto [rc, out] = Shell("nbdinfo --json '" + Uri() + "'");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"export-size\": 67108864"), std::string::npos) << out;
  for (const char* flag : {"\"can_flush\": true", "\"can_fua\": true", "\"can_trim\": true",
                           "\"can_zero\": true", "\"can_multi_conn\": true"}) {
    EXPECT_NE(out.find(flag), std::string::npos) << flag << " in " << out;
  }
  auto [rc2, list] = Shell("nbdinfo --list 'nbd+unix://?socket=" + socket_ + "'");
  EXPECT_EQ(rc2, 0) << list;
  EXPECT_NE(list.find("testvol"), std::string::npos) << list;
}

TEST_P(NbdInteropTest, NbdshReadWriteFlushTrimZero) {
  RequireTool("nbdsh");
  std::string script =
      "buf = b'\\xab' * 65536\n"
      "h.pwrite(buf, 1048576)\n"
      "h.flush()\n"
      "assert h.pread(65536, 1048576) == buf\n"
      "h.pwrite(b'\\x11' * 4096, 1048576 + 4096, nbd.CMD_FLAG_FUA)\n"
      "h.zero(8192, 1048576 + 8192)\n"
      "assert h.pread(8192, 1048576 + 8192) == bytes(8192)\n"
      "assert h.pread(4096, 1048576 + 16384) == b'\\xab' * 4096\n"
      "h.trim(65536, 2097152)\n"
      "h.flush()\n"
      "print('nbdsh-ok')\n";
  std::string path = dir_.path() + "/script.py";
  FILE* f = fopen(path.c_str(), "w");
  fputs(script.c_str(), f);
  fclose(f);
  // nbdsh needs the system python3 (with libnbd's module), not another on PATH.
  auto [rc, out] = Shell("PATH=/usr/bin:/bin:$PATH nbdsh -u '" + Uri() + "' -c \"exec(open('" + path + "').read())\"");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("nbdsh-ok"), std::string::npos) << out;
  AlignedBuffer b(4096);
  ASSERT_TRUE(engine_->Read(1048576 + 4096, b.data(), 4096).ok());
  EXPECT_EQ(b.data()[0], 0x11);
  ASSERT_TRUE(engine_->Read(1048576 + 8192, b.data(), 4096).ok());
  EXPECT_EQ(b.data()[0], 0);
}

TEST_P(NbdInteropTest, QemuIoAndQemuImg) {
  RequireTool("qemu-io");
  RequireTool("qemu-img");
  std::string target = "nbd:unix:" + socket_ + ":exportname=testvol";
  auto [rc, out] = Shell("qemu-img info " + target);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("64 MiB"), std::string::npos) << out;
  auto [rc2, io] = Shell("qemu-io -f raw " + target +
                       " -c 'write -P 0x5c 512 3M' -c 'flush' -c 'read -P 0x5c 512 3M'"
                       " -c 'write -z 1M 64k' -c 'read -P 0 1M 64k'");
  ASSERT_EQ(rc2, 0) << io;
  EXPECT_EQ(io.find("Pattern verification failed"), std::string::npos) << io;
  EXPECT_EQ(io.find("error"), std::string::npos) << io;
}

TEST_P(NbdInteropTest, FioWithVerify) {
  RequireTool("fio");
  auto [rc, out] =
      Shell("fio --aux-path='" + dir_.path() + "' --name=verify --ioengine=nbd --uri='" + Uri() +
            "' --rw=randwrite --bsrange=4k-64k --size=24M --offset_increment=24M "
            "--iodepth=32 --numjobs=2 --verify=crc32c --do_verify=1 --verify_fatal=1 "
            "--output-format=terse");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("verify:"), std::string::npos) << out;
  EXPECT_GT(engine_->stats().read_hits, 0u);
}

// A raw client: the handshake by hand, then requests a real client would
// never send. The server answers each with the protocol's error or a clean
// disconnect, and keeps serving others.
class RawClient {
 public:
  explicit RawClient(const std::string& path) {
    auto fd = shim::ConnectUnix(path);
    fd_ = fd.ok() ? fd.value() : -1;
  }
  ~RawClient() {
    if (fd_ >= 0) close(fd_);
  }
  bool Go(const std::string& name) {
    uint8_t hello[18];
    if (!shim::ReadFull(fd_, hello, 18)) return false;
    uint8_t flags[4];
    shim::PutBe32(flags, nbd::kClientFixedNewstyle | nbd::kClientNoZeroes);
    std::vector<uint8_t> data(4 + name.size() + 2);
    shim::PutBe32(data.data(), static_cast<uint32_t>(name.size()));
    std::memcpy(data.data() + 4, name.data(), name.size());
    shim::PutBe16(data.data() + 4 + name.size(), 0);
    if (!shim::WriteFull(fd_, flags, 4) || !SendOption(nbd::kOptGo, data)) return false;
    while (true) {
      uint8_t head[20];
      if (!shim::ReadFull(fd_, head, 20)) return false;
      uint32_t type = shim::GetBe32(head + 12), len = shim::GetBe32(head + 16);
      std::vector<uint8_t> skip(len);
      if (len && !shim::ReadFull(fd_, skip.data(), len)) return false;
      if (type == nbd::kRepAck) return true;
      if (type & (1u << 31)) return false;
    }
  }
  bool SendOption(uint32_t option, const std::vector<uint8_t>& data) {
    uint8_t head[16];
    shim::PutBe64(head, nbd::kOptMagic);
    shim::PutBe32(head + 8, option);
    shim::PutBe32(head + 12, static_cast<uint32_t>(data.size()));
    return shim::WriteFull(fd_, head, 16) && (data.empty() || shim::WriteFull(fd_, data.data(), data.size()));
  }
  bool Request(uint16_t type, uint64_t offset, uint32_t length, uint32_t magic = nbd::kRequestMagic) {
    uint8_t r[28];
    shim::PutBe32(r, magic);
    shim::PutBe16(r + 4, 0);
    shim::PutBe16(r + 6, type);
    shim::PutBe64(r + 8, 77);
    shim::PutBe64(r + 16, offset);
    shim::PutBe32(r + 24, length);
    return shim::WriteFull(fd_, r, 28);
  }
  // The error of the next simple reply, or -1 if the server hung up.
  int64_t ReplyError() {
    uint8_t r[16];
    if (!shim::ReadFull(fd_, r, 16)) return -1;
    return shim::GetBe32(r + 4);
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

TEST_P(NbdInteropTest, MalformedRequestsGetErrorsOrAHangUp) {
  {
    RawClient c(socket_);
    ASSERT_TRUE(c.Go("testvol"));
    ASSERT_TRUE(c.Request(nbd::kCmdRead, kOriginSize, 4096));
    EXPECT_EQ(c.ReplyError(), nbd::kEinval);
    ASSERT_TRUE(c.Request(nbd::kCmdTrim, kOriginSize - 4096, 8192));
    EXPECT_EQ(c.ReplyError(), nbd::kEnospc);
    ASSERT_TRUE(c.Request(nbd::kCmdRead, 100, 512));
    EXPECT_EQ(c.ReplyError(), nbd::kEinval);
    ASSERT_TRUE(c.Request(nbd::kCmdRead, 0, 0));
    EXPECT_EQ(c.ReplyError(), nbd::kEinval);
    ASSERT_TRUE(c.Request(42, 0, 4096));
    EXPECT_EQ(c.ReplyError(), nbd::kEinval);
    ASSERT_TRUE(c.Request(nbd::kCmdRead, UINT64_MAX - 511, 4096));
    EXPECT_EQ(c.ReplyError(), nbd::kEinval);
    ASSERT_TRUE(c.Request(nbd::kCmdRead, 0, 64 << 20));  // beyond the maximum payload: EINVAL,
    EXPECT_EQ(c.ReplyError(), nbd::kEinval);               // as the protocol says
    ASSERT_TRUE(c.Request(nbd::kCmdFlush, 0, 0));          // and the connection goes on
    EXPECT_EQ(c.ReplyError(), 0);
  }
  {
    RawClient c(socket_);
    ASSERT_TRUE(c.Go("testvol"));
    ASSERT_TRUE(c.Request(nbd::kCmdRead, 0, 4096, 0xdeadbeef));  // bad magic
    EXPECT_EQ(c.ReplyError(), -1);
  }
  {
    RawClient c(socket_);
    EXPECT_FALSE(c.Go("no-such-export"));
  }
  {
    // A client that vanishes halfway through a write's payload: nothing
    // of it is written.
    RawClient c(socket_);
    ASSERT_TRUE(c.Go(""));
    ASSERT_TRUE(c.Request(nbd::kCmdWrite, 0, 65536));
    std::vector<uint8_t> half(32768, 0xEE);
    ASSERT_TRUE(shim::WriteFull(c.fd(), half.data(), half.size()));
  }
  AlignedBuffer b(4096);
  ASSERT_TRUE(engine_->Read(0, b.data(), 4096).ok());
  EXPECT_EQ(b.data()[0], 0);
  RawClient after(socket_);
  ASSERT_TRUE(after.Go("testvol"));
  ASSERT_TRUE(after.Request(nbd::kCmdFlush, 0, 0));
  EXPECT_EQ(after.ReplyError(), 0);
}

// Fails every call with the Status it is given.
class FailingBackend : public shim::BlockBackend {
 public:
  uint64_t size() const override { return kOriginSize; }
  uint32_t preferred_block_size() const override { return 4096; }
  Status Read(uint64_t, void*, uint64_t) override { return Failure(); }
  Status Write(uint64_t, const void*, uint64_t, bool) override { return Failure(); }
  Status Flush() override { return Failure(); }
  Status Trim(uint64_t, uint64_t) override { return Failure(); }
  void FailWith(Status s) {
    std::lock_guard lock(mu_);
    failure_ = std::move(s);
  }

 private:
  Status Failure() {
    std::lock_guard lock(mu_);  // set by the test's thread, read by the server's
    return failure_;
  }
  std::mutex mu_;
  Status failure_ = Status::IoError("injected");
};

// What a client is told for each Status a backend returns: the errno
// conversion the server shares with ublk, then the protocol's own values
// (EBUSY has none: the engine is busy only once shut down, ESHUTDOWN).
TEST(NbdErrorsTest, EachBackendStatusGetsItsProtocolError) {
  TempDir dir;
  FailingBackend backend;
  shim::NbdServerOptions o;
  o.unix_path = dir.path() + "/nbd";
  auto server = shim::NbdServer::Start(&backend, o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::pair<Status, uint32_t> cases[] = {
      {Status::InvalidArgument("injected"), nbd::kEinval},
      {Status::OutOfRange("injected"), nbd::kEnospc},
      {Status::NoSpace("injected"), nbd::kEnospc},
      {Status::Busy("injected"), nbd::kEshutdown},
      {Status::NotSupported("injected"), nbd::kEnotsup},
      {Status::IoError("injected"), nbd::kEio},
      {Status::Corruption("injected"), nbd::kEio},
      {Status::NotFound("injected"), nbd::kEio},
  };
  RawClient c(o.unix_path);
  ASSERT_TRUE(c.Go(""));
  for (const auto& [status, error] : cases) {
    SCOPED_TRACE(status.ToString());
    backend.FailWith(status);
    for (uint16_t type : {nbd::kCmdRead, nbd::kCmdFlush, nbd::kCmdTrim, nbd::kCmdWriteZeroes}) {
      ASSERT_TRUE(c.Request(type, 0, 4096));
      EXPECT_EQ(c.ReplyError(), error) << "command " << type;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, NbdInteropTest,
                         ::testing::Values(CacheMode::kWriteThrough, CacheMode::kWriteBack),
                         [](const auto& info) { return std::string(CacheModeName(info.param)); });

}  // namespace
}  // namespace cachecore::testing
