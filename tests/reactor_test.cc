// The reactor: posted work runs on its thread in order, Stop waits for what
// is in flight, and a device's Submit runs asynchronously on the reactor of
// the calling thread (many requests in flight on one thread) but inline
// anywhere else.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "cachecore/devices/reactor.h"
#include "cachecore/devices/file_device.h"
#include "cachecore/devices/memory_device.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

std::unique_ptr<Reactor> NewReactor() {
  Result<std::unique_ptr<Reactor>> r = Reactor::Create();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r.value()) : nullptr;
}

// A task that runs a function (tests only: the product's tasks are members).
struct FnTask final : ReactorTask {
  std::function<void()> fn;
  explicit FnTask(std::function<void()> f) : fn(std::move(f)) {}
  void Run() override { fn(); }
};

TEST(ReactorTest, PostedTasksRunOnTheReactorThreadInOrder) {
  auto reactor = NewReactor();
  ASSERT_TRUE(reactor);
  std::thread::id reactor_thread;
  std::thread runner([&] {
    reactor_thread = std::this_thread::get_id();
    reactor->Run();
  });
  std::vector<int> order;
  std::vector<std::thread::id> ran_on;
  std::vector<std::unique_ptr<FnTask>> tasks;
  for (int i = 0; i < 100; ++i) {
    tasks.push_back(std::make_unique<FnTask>([&, i] {
      order.push_back(i);
      ran_on.push_back(std::this_thread::get_id());
      EXPECT_EQ(Reactor::Current(), reactor.get());
    }));
  }
  for (auto& t : tasks) reactor->Post(t.get());
  FnTask stop([&] { reactor->Stop(); });
  reactor->Post(&stop);
  runner.join();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(order[i], i);
    EXPECT_EQ(ran_on[i], reactor_thread);
  }
  EXPECT_EQ(Reactor::Current(), nullptr);
}

TEST(ReactorTest, ADeferredTaskRunsBeforeTheReactorWaitsAgain) {
  auto reactor = NewReactor();
  int deferred_runs = 0;
  FnTask deferred([&] {
    ++deferred_runs;
    reactor->Stop();  // nothing else would wake the reactor: it must not wait first
  });
  FnTask start([&] {
    reactor->Defer(&deferred);
    EXPECT_EQ(deferred_runs, 0);  // not inline
  });
  reactor->Post(&start);
  reactor->Run();
  EXPECT_EQ(deferred_runs, 1);
}

// A completion that counts and checks where it ran.
struct Counter final : IoCompletion {
  Reactor* expected = nullptr;
  int done = 0, failed = 0;
  uint64_t max_in_flight = 0;
  void IoDone(AsyncIo& io) override {
    EXPECT_EQ(Reactor::Current(), expected);
    ++done;
    failed += io.request.status.ok() ? 0 : 1;
  }
};

std::string MakeFile(const std::string& dir, uint64_t size) {
  std::string path = dir + "/dev.img";
  int fd = open(path.c_str(), O_CREAT | O_RDWR, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  close(fd);
  return path;
}

// The file device of this machine: io_uring's, or libaio's where io_uring
// is not used (this binary runs again with CACHECTL_IO_URING=off).
TEST(ReactorTest, FileDeviceRunsManyRequestsAsynchronouslyOnOneThread) {
  TempDir dir;
  constexpr int kRequests = 200;
  auto device = OpenFileDevice(MakeFile(dir.path(), kRequests * 4096));
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  auto reactor = NewReactor();
  ASSERT_TRUE(reactor);
  std::vector<AlignedBuffer> buffers;
  for (int i = 0; i < kRequests; ++i) {
    buffers.emplace_back(4096);
    std::memset(buffers.back().data(), i & 0xFF, 4096);
  }
  std::vector<AsyncIo> ios(kRequests);
  Counter writes, reads;
  writes.expected = reads.expected = reactor.get();
  FnTask submit_writes([&] {
    for (int i = 0; i < kRequests; ++i) {
      ios[i].request = {IoOp::kWrite, uint64_t(i) * 4096, 4096, buffers[i].data(), Status()};
      ios[i].done = &writes;
      device.value()->Submit(ios[i]);
    }
    // Nothing completed yet: every request is in flight at once.
    EXPECT_EQ(writes.done, 0);
    writes.max_in_flight = reactor->in_flight();
  });
  reactor->Post(&submit_writes);
  FnTask stop([&] { reactor->Stop(); });
  reactor->Post(&stop);
  reactor->Run();
  EXPECT_EQ(writes.done, kRequests);
  EXPECT_EQ(writes.failed, 0);
  EXPECT_EQ(writes.max_in_flight, uint64_t{kRequests});

  // Read back, on a reactor again; then the data is what was written.
  auto reactor2 = NewReactor();
  reads.expected = reactor2.get();
  for (auto& b : buffers) std::memset(b.data(), 0xEE, 4096);
  FnTask submit_reads([&] {
    for (int i = 0; i < kRequests; ++i) {
      ios[i].request = {IoOp::kRead, uint64_t(i) * 4096, 4096, buffers[i].data(), Status()};
      ios[i].done = &reads;
      device.value()->Submit(ios[i]);
    }
    reactor2->Stop();  // Run still waits for the reads in flight
  });
  reactor2->Post(&submit_reads);
  reactor2->Run();
  EXPECT_EQ(reads.done, kRequests);
  EXPECT_EQ(reads.failed, 0);
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(buffers[i].data()[100], i & 0xFF) << i;
}

TEST(ReactorTest, SubmitOffAReactorCompletesBeforeReturning) {
  TempDir dir;
  auto device = OpenFileDevice(MakeFile(dir.path(), 1 << 20));
  ASSERT_TRUE(device.ok());
  AlignedBuffer buffer(4096);
  Counter counter;  // expects no reactor
  AsyncIo io;
  io.request = {IoOp::kRead, 8192, 4096, buffer.data(), Status()};
  io.done = &counter;
  device.value()->Submit(io);
  EXPECT_EQ(counter.done, 1);
  // A bad request fails in its status, also on the way through Submit.
  io.request = {IoOp::kRead, 1 << 20, 4096, buffer.data(), Status()};
  device.value()->Submit(io);
  EXPECT_EQ(counter.done, 2);
  EXPECT_EQ(counter.failed, 1);
  // A device without a reactor path (memory) completes inline on a reactor.
  auto memory = NewMemoryDevice(1 << 20, "m");
  auto reactor = NewReactor();
  counter.expected = reactor.get();
  FnTask submit([&] {
    io.request = {IoOp::kRead, 0, 4096, buffer.data(), Status()};
    memory->Submit(io);
    EXPECT_EQ(counter.done, 3);
    reactor->Stop();
  });
  reactor->Post(&submit);
  reactor->Run();
}

// Socket operations: what one end sends the other receives, through the ring.
struct SocketOp final : ReactorOp {
  int result = -1;
  bool completed = false;
  void OnComplete(int r) override {
    result = r;
    completed = true;
  }
};

TEST(ReactorTest, SendAndReceiveOnASocket) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  auto reactor = NewReactor();
  char out[] = "hello, reactor";
  char in[sizeof(out)] = {};
  iovec iov{out, sizeof(out)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  SocketOp sent, received;
  FnTask start([&] {
    reactor->Recv(fds[1], in, sizeof(in), &received);
    reactor->SendMsg(fds[0], &msg, &sent);
    reactor->Stop();
  });
  reactor->Post(&start);
  reactor->Run();
  EXPECT_EQ(sent.result, static_cast<int>(sizeof(out)));
  EXPECT_EQ(received.result, static_cast<int>(sizeof(out)));
  EXPECT_STREQ(in, out);
  close(fds[0]);
  close(fds[1]);
}

struct OrderTimer final : ReactorTimer {
  std::vector<int>* order = nullptr;
  int id = 0, result = 0;
  void OnComplete(int r) override {
    result = r;
    order->push_back(id);
  }
};

// What waits: timers complete in the order of their deadlines, and a
// receive on a socket with nothing in it completes once the peer sends
// (from another thread, later), not before.
TEST(ReactorTest, TimersAndAWaitingReceiveCompleteWhenDue) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  auto reactor = NewReactor();
  ASSERT_TRUE(reactor);
  std::vector<int> order;
  OrderTimer late, early;
  late.order = early.order = &order;
  late.id = 2;
  early.id = 1;
  char in[8] = {};
  SocketOp received;
  FnTask start([&] {
    reactor->After(30'000'000, &late);
    reactor->After(5'000'000, &early);
    reactor->Recv(fds[1], in, sizeof(in), &received);
    reactor->Stop();  // Run still waits for all three
  });
  std::thread peer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    EXPECT_EQ(write(fds[0], "late", 4), 4);
  });
  reactor->Post(&start);
  reactor->Run();
  peer.join();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(early.result, -ETIME);
  EXPECT_EQ(late.result, -ETIME);
  EXPECT_EQ(received.result, 4);
  EXPECT_STREQ(in, "late");
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace cachecore::testing
