// NbdDevice keeps as many requests in flight at the server as its callers
// send (issue 15): 32 threads with one read each must reach the server
// together, not four at a time. nbdkit's delay filter holds every read long
// enough to overlap, and its log filter writes a line when a read enters the
// server and another when it leaves: the deepest overlap in the log is what
// the server saw, whatever the timing. Also: a lost connection fails waiting
// and later callers (naming the URI) instead of hanging them, a server's
// error fails only its request, and a request larger than one NBD command
// still round-trips.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cachecore/devices/nbd_device.h"
#include "cachecore/devices/reactor.h"
#include "support/engine_rig.h"
#include "support/nbdkit_server.h"

namespace cachecore::testing {
namespace {

constexpr int kThreads = 32;
constexpr uint64_t kBlock = 4096;

// What the log filter recorded of the reads: the deepest overlap and the
// connections they came on.
struct ReadLog {
  int max_in_flight = 0;
  int reads = 0;
  std::set<std::string> connections;
};

// Lines look like "<date> <time> connection=2 Read id=7 offset=..." when a
// read enters and "<date> <time> connection=2 ...Read id=7 return=0" when it
// leaves. The filter writes each line as it happens, so the count of reads
// entered and not yet left, in file order, is what the server held at once.
ReadLog ParseLog(const std::string& path) {
  ReadLog log;
  std::ifstream in(path);
  int depth = 0;
  for (std::string line; std::getline(in, line);) {
    size_t conn = line.find("connection=");
    if (conn == std::string::npos) continue;
    std::string who = line.substr(conn, line.find(' ', conn) - conn);
    if (line.find(" Read id=") != std::string::npos) {
      log.connections.insert(who);
      ++log.reads;
      log.max_in_flight = std::max(log.max_in_flight, ++depth);
    } else if (line.find(" ...Read id=") != std::string::npos) {
      --depth;
    }
  }
  return log;
}

// nbdkit with the log filter outermost (it sees the requests as the client
// sent them) and every read held for `delay` by the delay filter. Threads
// per connection raised above kThreads so that nbdkit itself never caps
// the depth. (The memory plugin allows multi-conn.)
std::vector<std::string> DelayedMemory(const TempDir& dir, const std::string& delay) {
  std::vector<std::string> args = {"--threads=64", "--filter=log", "--filter=delay", "memory"};
  args.insert(args.end(), {"size=64M", "logfile=" + dir.path() + "/nbdkit.log"});
  args.push_back("delay-read=" + delay);
  return args;
}

// Long enough that every request is sent while the first is held, even on
// a slow, loaded machine (the checks count requests in flight at once).
const char* const kHeld = "3";

std::string PidFile(const TempDir& dir) { return dir.path() + "/nbdkit.pid"; }

// Returns once nbdkit accepts connections (NbdkitServer waits for its pid
// file, PidFile(dir)).
std::unique_ptr<NbdkitServer> StartNbdkit(const TempDir& dir, std::vector<std::string> args) {
  return std::make_unique<NbdkitServer>(dir.path(), args);
}

std::unique_ptr<BlockDevice> Open(const NbdkitServer& server, unsigned connections = 4) {
  Result<std::unique_ptr<BlockDevice>> dev =
      OpenNbdDevice(server.uri(), NbdDeviceOptions{.connections = connections});
  EXPECT_TRUE(dev.ok()) << dev.status().ToString();
  return dev.ok() ? std::move(dev.value()) : nullptr;
}

// kThreads threads, released together, each reading its own 4 KiB block
// once; returns each one's status.
std::vector<Status> ReadFromManyThreads(BlockDevice& dev) {
  std::vector<Status> results(kThreads);
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer buf(kBlock);
      start.arrive_and_wait();
      results[t] = dev.Read(t * 16 * kBlock, buf.data(), kBlock);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

// The server's view of kThreads concurrent single-block reads through a
// device with at most `connections` connections.
ReadLog DepthSeenByServer(unsigned connections) {
  TempDir dir;
  std::unique_ptr<NbdkitServer> server = StartNbdkit(dir, DelayedMemory(dir, kHeld));
  if (!server->running()) return {};
  std::unique_ptr<BlockDevice> dev = Open(*server, connections);
  if (!dev) return {};
  for (const Status& s : ReadFromManyThreads(*dev)) EXPECT_TRUE(s.ok()) << s.ToString();
  dev.reset();
  server.reset();  // nbdkit exits: the log is complete
  return ParseLog(dir.path() + "/nbdkit.log");
}

TEST(NbdDeviceDepth, ManyCallersKeepManyRequestsInFlight) {
  ReadLog log = DepthSeenByServer(4);
  RecordProperty("max_in_flight", log.max_in_flight);
  EXPECT_EQ(log.reads, kThreads);
  // 32 in flight when every caller's read overlaps; 16 leaves room for a
  // slow thread start, and is four times what one request per connection
  // allowed.
  EXPECT_GE(log.max_in_flight, 16)
      << "reads seen on " << log.connections.size() << " connection(s)";
}

// One connection, as with a server without multi-conn, still carries every
// caller's request at once. (nbdkit 1.32's multi-conn filter would hide
// multi-conn, but its disable mode aborts the server at disconnect.)
TEST(NbdDeviceDepth, OneConnectionStillPipelines) {
  ReadLog log = DepthSeenByServer(1);
  RecordProperty("max_in_flight", log.max_in_flight);
  EXPECT_EQ(log.reads, kThreads);
  EXPECT_EQ(log.connections.size(), 1u);
  EXPECT_GE(log.max_in_flight, 16);
}

// Waits until the log shows `n` reads entered (the server holds them).
bool AwaitReadsAtServer(const std::string& log_path, int n) {
  for (int i = 0; i < 3000 && ParseLog(log_path).reads < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ParseLog(log_path).reads >= n;
}

void KillServer(const std::string& pid_path) {
  std::ifstream in(pid_path);
  pid_t pid = 0;
  ASSERT_TRUE(in >> pid) << "no pid in " << pid_path;
  ASSERT_EQ(kill(pid, SIGKILL), 0);
}

void ExpectConnectionLost(const Status& s, const std::string& uri) {
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_NE(s.message().find(uri), std::string::npos) << s.ToString();
}

// The server dies with reads in flight: each waiting caller gets an IoError
// naming the URI, and so does every later call; nothing hangs and the
// device still closes.
TEST(NbdDeviceDepth, LostConnectionFailsWaitersAndLaterCalls) {
  TempDir dir;
  // Reads held far longer than the test takes to kill the server.
  std::unique_ptr<NbdkitServer> server = StartNbdkit(dir, DelayedMemory(dir, "60"));
  ASSERT_TRUE(server->running());
  std::unique_ptr<BlockDevice> dev = Open(*server);
  ASSERT_NE(dev, nullptr);
  std::vector<Status> results;
  std::thread readers([&] { results = ReadFromManyThreads(*dev); });
  // Four: as many as the old one-request-per-connection device sent.
  EXPECT_TRUE(AwaitReadsAtServer(dir.path() + "/nbdkit.log", 4));
  KillServer(PidFile(dir));
  readers.join();
  for (const Status& s : results) ExpectConnectionLost(s, server->uri());
  if (!results.empty()) RecordProperty("message", results[0].ToString());
  AlignedBuffer buf(kBlock);
  ExpectConnectionLost(dev->Read(0, buf.data(), kBlock), server->uri());
  ExpectConnectionLost(dev->Write(0, buf.data(), kBlock), server->uri());
  dev.reset();
}

// A server's error fails that request alone, told apart from a lost
// connection: the connection stays and the next request succeeds.
TEST(NbdDeviceDepth, ServerErrorFailsTheRequestNotTheConnection) {
  TempDir dir;
  std::unique_ptr<NbdkitServer> server = StartNbdkit(
      dir, {"--filter=error", "memory", "size=64M", "error-pread=EIO", "error-pread-rate=100%"});
  ASSERT_TRUE(server->running());
  std::unique_ptr<BlockDevice> dev = Open(*server);
  ASSERT_NE(dev, nullptr);
  AlignedBuffer buf(kBlock);
  Status read = dev->Read(0, buf.data(), kBlock);
  EXPECT_EQ(read.code(), StatusCode::kIoError);
  EXPECT_NE(read.message().find("NBD server: "), std::string::npos) << read.ToString();
  EXPECT_TRUE(dev->Write(0, buf.data(), kBlock).ok());
}

// A request larger than one NBD command (32 MiB) goes out in pieces, on
// one handle, and comes back whole; many writers then a flush all succeed.
TEST(NbdDeviceDepth, LargeRequestsSplitAndConcurrentWritesFlush) {
  TempDir dir;
  std::unique_ptr<NbdkitServer> server = StartNbdkit(dir, {"memory", "size=64M"});
  ASSERT_TRUE(server->running());
  std::unique_ptr<BlockDevice> dev = Open(*server);
  ASSERT_NE(dev, nullptr);
  constexpr uint64_t kLarge = 40 << 20;
  AlignedBuffer w(kLarge), r(kLarge);
  for (uint64_t i = 0; i < kLarge; ++i) w.data()[i] = static_cast<uint8_t>(i * 7 + i / 4096);
  ASSERT_TRUE(dev->Write(4096, w.data(), kLarge).ok());
  ASSERT_TRUE(dev->Read(4096, r.data(), kLarge).ok());
  EXPECT_EQ(std::memcmp(w.data(), r.data(), kLarge), 0);

  std::vector<std::thread> writers;
  std::vector<Status> results(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      AlignedBuffer b(kBlock);
      std::memset(b.data(), t + 1, kBlock);
      results[t] = dev->Write(t * kBlock, b.data(), kBlock);
    });
  }
  for (std::thread& t : writers) t.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(dev->Flush().ok());
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(dev->Read(t * kBlock, r.data(), kBlock).ok());
    EXPECT_EQ(r.data()[0], t + 1);
    EXPECT_EQ(r.data()[kBlock - 1], t + 1);
  }
}

// Requests submitted on a reactor: one thread keeps them all in flight at
// the server at once (nothing waits per request), and each completes on
// that reactor with its own outcome.
struct ReactorRequests final : IoCompletion {
  std::vector<AsyncIo> ios;
  std::vector<AlignedBuffer> buffers;
  Reactor* reactor = nullptr;
  size_t left = 0, elsewhere = 0;
  void IoDone(AsyncIo&) override {
    if (Reactor::Current() != reactor) ++elsewhere;
    if (--left == 0) reactor->Stop();
  }
  // Submits every request from the reactor's thread and runs it until all
  // have completed.
  void RunAll(BlockDevice& dev) {
    auto created = Reactor::Create();
    ASSERT_TRUE(created.ok());
    reactor = created.value().get();
    left = ios.size();
    struct Start final : ReactorTask {
      ReactorRequests* self;
      BlockDevice* dev;
      void Run() override {
        for (AsyncIo& io : self->ios) dev->Submit(io);
      }
    } start;
    start.self = this;
    start.dev = &dev;
    reactor->Post(&start);
    reactor->Run();
  }
  void Add(IoOp op, uint64_t offset, uint64_t length) {
    buffers.emplace_back(length);
    ios.emplace_back();
    ios.back().request = {op, offset, length, buffers.back().data(), Status()};
    ios.back().done = this;
  }
};

TEST(NbdDeviceDepth, OneReactorKeepsEveryRequestInFlight) {
  TempDir dir;
  std::unique_ptr<NbdkitServer> server = StartNbdkit(dir, DelayedMemory(dir, kHeld));
  ASSERT_TRUE(server->running());
  std::unique_ptr<BlockDevice> dev = Open(*server, 1);
  ASSERT_NE(dev, nullptr);
  EXPECT_TRUE(dev->discards_without_waiting());
  ReactorRequests reads;
  reads.buffers.reserve(kThreads);
  reads.ios.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) reads.Add(IoOp::kRead, t * 16 * kBlock, kBlock);
  reads.RunAll(*dev);
  for (const AsyncIo& io : reads.ios) EXPECT_TRUE(io.request.status.ok()) << io.request.status.ToString();
  EXPECT_EQ(reads.elsewhere, 0u);
  dev.reset();
  server.reset();  // nbdkit exits: the log is complete
  ReadLog log = ParseLog(dir.path() + "/nbdkit.log");
  EXPECT_EQ(log.reads, kThreads);
  EXPECT_EQ(log.max_in_flight, kThreads) << "one thread's reads did not all reach the server together";
}

TEST(NbdDeviceDepth, WritesFlushesAndErrorsOnAReactor) {
  TempDir dir;
  std::unique_ptr<NbdkitServer> server = StartNbdkit(dir, {"memory", "size=1M"});
  ASSERT_TRUE(server->running());
  std::unique_ptr<BlockDevice> dev = Open(*server);
  ASSERT_NE(dev, nullptr);
  ReactorRequests writes;
  writes.buffers.reserve(3);
  writes.ios.reserve(3);
  writes.Add(IoOp::kWrite, 0, 2 * kBlock);
  std::memset(writes.buffers[0].data(), 0x5A, 2 * kBlock);
  writes.Add(IoOp::kFlush, 0, 0);
  writes.Add(IoOp::kRead, 1 << 20, kBlock);  // past the end: refused, answered at once
  writes.RunAll(*dev);
  EXPECT_TRUE(writes.ios[0].request.status.ok()) << writes.ios[0].request.status.ToString();
  EXPECT_TRUE(writes.ios[1].request.status.ok()) << writes.ios[1].request.status.ToString();
  EXPECT_EQ(writes.ios[2].request.status.code(), StatusCode::kOutOfRange);
  AlignedBuffer back(2 * kBlock);
  ASSERT_TRUE(dev->Read(0, back.data(), 2 * kBlock).ok());
  EXPECT_EQ(std::memcmp(back.data(), writes.buffers[0].data(), 2 * kBlock), 0);
}

}  // namespace
}  // namespace cachecore::testing
