// One contract, every BlockDevice: the memory device, libaio and io_uring
// on a real file and a loop device (O_DIRECT), libnbd, and the
// fault-injecting wrapper with and without its volatile cache. Each test body runs against each implementation.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "cachecore/devices/file_device.h"
#include "support/fault_device.h"
#include "cachecore/devices/memory_device.h"
#include "cachecore/devices/nbd_device.h"
#include "support/engine_rig.h"
#include "support/nbdkit_server.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kSize = 4 << 20;

struct DeviceUnderTest {
  TempDir dir;
  std::unique_ptr<NbdkitServer> server;  // for the NBD device; outlives `base`
  std::string loop;  // a loop device to detach afterwards
  std::unique_ptr<BlockDevice> base;
  std::unique_ptr<BlockDevice> wrapper;
  BlockDevice* device = nullptr;
  ~DeviceUnderTest() {
    base.reset();
    if (!loop.empty()) (void)!std::system(("losetup -d " + loop).c_str());
  }
};

using Factory = std::function<void(DeviceUnderTest&)>;

struct Impl {
  const char* name;
  Factory make;
};

void MakeMemory(DeviceUnderTest& d) {
  d.base = NewMemoryDevice(kSize, "contract");
  d.device = d.base.get();
}

// A sparse file of kSize bytes at `path`.
void MakeSizedFile(const std::string& path) {
  int fd = open(path.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kSize), 0);
  close(fd);
}

Result<std::unique_ptr<BlockDevice>> OpenWith(IoBackend backend, const std::string& path) {
  FileDeviceOptions options;
  options.backend = backend;
  return OpenFileDevice(path, options);
}

void MakeFile(DeviceUnderTest& d, IoBackend backend) {
  std::string path = d.dir.path() + "/device.img";
  MakeSizedFile(path);
  Result<std::unique_ptr<BlockDevice>> dev = OpenWith(backend, path);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  d.base = std::move(dev.value());
  d.device = d.base.get();
}

// A real block device: a loop device over a file (needs root; CI is root).
// Not being able to make one fails the test; it is never skipped.
void MakeLoop(DeviceUnderTest& d, IoBackend backend) {
  std::string path = d.dir.path() + "/loop.img";
  MakeSizedFile(path);
  FILE* p = popen(("losetup --find --show " + path + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[256] = {};
  bool got = fgets(line, sizeof(line), p) != nullptr;
  pclose(p);
  std::string dev = got ? std::string(line, strcspn(line, "\n")) : "";
  ASSERT_EQ(dev.rfind("/dev/loop", 0), 0u) << "losetup failed: " << dev;
  d.loop = dev;
  Result<std::unique_ptr<BlockDevice>> opened = OpenWith(backend, dev);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened.value()->identity(), "blkdev:" + dev);
  d.base = std::move(opened.value());
  d.device = d.base.get();
}

// An NBD export (nbdkit's memory plugin) through libnbd: an origin that
// is a network volume.
void MakeNbd(DeviceUnderTest& d) {
  d.server = std::make_unique<NbdkitServer>(d.dir.path(), std::vector<std::string>{
                                                "memory", "size=" + std::to_string(kSize)});
  ASSERT_TRUE(d.server->running());
  Result<std::unique_ptr<BlockDevice>> dev = OpenNbdDevice(d.server->uri());
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  d.base = std::move(dev.value());
  d.device = d.base.get();
}

void MakeFault(DeviceUnderTest& d, bool volatile_cache) {
  d.base = NewMemoryDevice(kSize, "contract");
  d.wrapper = std::make_unique<FaultDevice>(d.base.get(), volatile_cache);
  d.device = d.wrapper.get();
}

const Impl kImpls[] = {
    {"Memory", MakeMemory},
    {"AioFile", [](DeviceUnderTest& d) { MakeFile(d, IoBackend::kAio); }},
    {"AioLoopBlockDevice", [](DeviceUnderTest& d) { MakeLoop(d, IoBackend::kAio); }},
    {"UringFile", [](DeviceUnderTest& d) { MakeFile(d, IoBackend::kUring); }},
    {"UringLoopBlockDevice", [](DeviceUnderTest& d) { MakeLoop(d, IoBackend::kUring); }},
    {"Nbd", MakeNbd},
    {"Fault", [](DeviceUnderTest& d) { MakeFault(d, false); }},
    {"FaultVolatile", [](DeviceUnderTest& d) { MakeFault(d, true); }},
};

class BlockDeviceContract : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override {
    GetParam().make(dut_);
    ASSERT_NE(dut_.device, nullptr);
  }
  BlockDevice& dev() { return *dut_.device; }
  DeviceUnderTest dut_;
};

void Fill(AlignedBuffer& b, uint8_t seed) {
  for (size_t i = 0; i < b.size(); ++i) b.data()[i] = static_cast<uint8_t>(seed + i * 31);
}

TEST_P(BlockDeviceContract, ReportsItsSizeAndIdentity) {
  EXPECT_EQ(dev().size_bytes(), kSize);
  EXPECT_FALSE(dev().identity().empty());
}

TEST_P(BlockDeviceContract, ReadsBackWhatWasWritten) {
  AlignedBuffer w(64 * 1024), r(64 * 1024);
  Fill(w, 7);
  ASSERT_TRUE(dev().Write(512 * 3, w.data(), w.size()).ok());
  ASSERT_TRUE(dev().Read(512 * 3, r.data(), r.size()).ok());
  EXPECT_EQ(std::memcmp(w.data(), r.data(), w.size()), 0);
}

TEST_P(BlockDeviceContract, UnwrittenRegionReadsZero) {
  AlignedBuffer r(8192);
  std::memset(r.data(), 0xAB, r.size());
  ASSERT_TRUE(dev().Read(kSize - 8192, r.data(), r.size()).ok());
  for (size_t i = 0; i < r.size(); ++i) ASSERT_EQ(r.data()[i], 0) << i;
}

TEST_P(BlockDeviceContract, RefusesMisalignedAndOutOfRange) {
  AlignedBuffer b(8192);
  EXPECT_EQ(dev().Read(100, b.data(), 512).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev().Read(0, b.data(), 100).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev().Read(0, b.data(), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev().Write(0, b.data() + 1, 512).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev().Write(kSize - 512, b.data(), 1024).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(dev().Read(kSize, b.data(), 512).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(dev().Read(UINT64_MAX - 511, b.data(), 512).code(), StatusCode::kOutOfRange);
}

TEST_P(BlockDeviceContract, RefusedWriteChangesNothing) {
  AlignedBuffer w(1024), r(512);
  Fill(w, 3);
  ASSERT_FALSE(dev().Write(kSize - 512, w.data(), 1024).ok());
  ASSERT_TRUE(dev().Read(kSize - 512, r.data(), 512).ok());
  for (size_t i = 0; i < 512; ++i) ASSERT_EQ(r.data()[i], 0);
}

TEST_P(BlockDeviceContract, BatchRunsEveryRequestAndReportsEach) {
  constexpr int kN = 40;  // more than the inline batch size
  std::vector<AlignedBuffer> bufs;
  std::vector<IoRequest> reqs;
  for (int i = 0; i < kN; ++i) {
    bufs.emplace_back(4096);
    Fill(bufs.back(), static_cast<uint8_t>(i));
  }
  for (int i = 0; i < kN; ++i) reqs.push_back({IoOp::kWrite, uint64_t(i) * 8192, 4096, bufs[i].data(), {}});
  reqs.push_back({IoOp::kWrite, kSize, 4096, bufs[0].data(), {}});  // one bad request
  Status s = dev().SubmitAndWait(reqs);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  for (int i = 0; i < kN; ++i) EXPECT_TRUE(reqs[i].status.ok()) << i;
  EXPECT_FALSE(reqs[kN].status.ok());
  AlignedBuffer r(4096);
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(dev().Read(uint64_t(i) * 8192, r.data(), 4096).ok());
    ASSERT_EQ(std::memcmp(r.data(), bufs[i].data(), 4096), 0) << i;
  }
}

TEST_P(BlockDeviceContract, FlushSucceeds) { EXPECT_TRUE(dev().Flush().ok()); }

TEST_P(BlockDeviceContract, DiscardLeavesZerosOrOldData) {
  AlignedBuffer w(65536), r(65536);
  Fill(w, 9);
  ASSERT_TRUE(dev().Write(0, w.data(), w.size()).ok());
  ASSERT_TRUE(dev().Discard(0, w.size()).ok());
  ASSERT_TRUE(dev().Read(0, r.data(), r.size()).ok());
  bool zeros = std::all_of(r.data(), r.data() + r.size(), [](uint8_t c) { return c == 0; });
  bool old = std::memcmp(r.data(), w.data(), w.size()) == 0;
  EXPECT_TRUE(dev().supports_discard() ? zeros : (zeros || old));
}

TEST_P(BlockDeviceContract, ManyThreadsManyRequestsInFlight) {
  constexpr int kThreads = 8, kOps = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      AlignedBuffer w(4096), r(4096);
      for (int i = 0; i < kOps; ++i) {
        uint64_t off = (uint64_t(t) * 64 + rng() % 64) * 4096;  // each thread its own region
        Fill(w, static_cast<uint8_t>(rng()));
        if (!dev().Write(off, w.data(), 4096).ok() || !dev().Read(off, r.data(), 4096).ok() ||
            std::memcmp(w.data(), r.data(), 4096) != 0) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Devices, BlockDeviceContract, ::testing::ValuesIn(kImpls),
                         [](const auto& info) { return std::string(info.param.name); });

// The file devices' own promises, each back end.
class FileDeviceTest : public ::testing::TestWithParam<IoBackend> {};

TEST_P(FileDeviceTest, MissingPathSaysWhich) {
  Result<std::unique_ptr<BlockDevice>> dev = OpenWith(GetParam(), "/nonexistent/cachectl-device");
  ASSERT_FALSE(dev.ok());
  EXPECT_NE(dev.status().message().find("/nonexistent/cachectl-device"), std::string::npos);
}

TEST_P(FileDeviceTest, RefusesSizeNotMultipleOf512) {
  TempDir dir;
  std::string path = dir.path() + "/odd.img";
  int fd = open(path.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1000), 0);
  close(fd);
  Result<std::unique_ptr<BlockDevice>> dev = OpenWith(GetParam(), path);
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), StatusCode::kInvalidArgument);
}

TEST_P(FileDeviceTest, DataReachesTheFile) {
  TempDir dir;
  std::string path = dir.path() + "/data.img";
  int fd = open(path.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  {
    Result<std::unique_ptr<BlockDevice>> dev = OpenWith(GetParam(), path);
    ASSERT_TRUE(dev.ok());
    AlignedBuffer w(4096);
    Fill(w, 42);
    ASSERT_TRUE(dev.value()->Write(8192, w.data(), 4096).ok());
    ASSERT_TRUE(dev.value()->Flush().ok());
  }
  uint8_t byte = 0;
  ASSERT_EQ(pread(fd, &byte, 1, 8192 + 5), 1);
  EXPECT_EQ(byte, static_cast<uint8_t>(42 + 5 * 31));
  close(fd);
}

INSTANTIATE_TEST_SUITE_P(Backends, FileDeviceTest,
                         ::testing::Values(IoBackend::kAio, IoBackend::kUring),
                         [](const auto& info) {
                           return std::string(info.param == IoBackend::kAio ? "Aio" : "Uring");
                         });

}  // namespace
}  // namespace cachecore::testing
