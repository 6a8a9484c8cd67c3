// The NBD session on a reactor, over a backend that holds requests until the
// test lets them go: it answers in whatever order requests complete, stops
// reading when too much is taken, and ends, with every request answered or
// its client gone, however the connection goes down.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "../dm-target-shim/src/nbd_async.h"
#include "../dm-target-shim/src/nbd_connection.h"
#include "../dm-target-shim/src/nbd_protocol.h"
#include "shim/nbd_server.h"
#include "shim/socket_io.h"

namespace shim {
namespace {

using namespace nbd;

// Holds every request until Release; then completes them (from this thread,
// as the engine's workers would).
class ParkingBackend : public BlockBackend {
 public:
  uint64_t size() const override { return 1ull << 30; }
  uint32_t preferred_block_size() const override { return 4096; }
  Status Read(uint64_t, void*, uint64_t) override { return Status::Ok(); }
  Status Write(uint64_t, const void*, uint64_t, bool) override { return Status::Ok(); }
  Status Flush() override { return Status::Ok(); }
  Status Trim(uint64_t, uint64_t) override { return Status::Ok(); }
  bool asynchronous() const override { return true; }
  void ReadAsync(uint64_t, void*, uint64_t, Completion* done) override { Park(done, 'r'); }
  void WriteAsync(uint64_t, const void*, uint64_t, bool, Completion* done) override {
    Park(done, 'w');
  }
  void FlushAsync(Completion* done) override { Park(done, 'f'); }
  void TrimAsync(uint64_t, uint64_t, Completion* done) override { Park(done, 't'); }

  size_t Parked() {
    std::lock_guard lock(mu_);
    return parked_.size();
  }
  // Waits until `n` requests are parked.
  void WaitParked(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return parked_.size() >= n; });
  }
  // Completes the parked requests of `kind`, oldest first.
  void Release(char kind) {
    std::vector<Completion*> go;
    {
      std::lock_guard lock(mu_);
      for (auto it = parked_.begin(); it != parked_.end();) {
        if (it->second == kind) {
          go.push_back(it->first);
          it = parked_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Completion* c : go) c->Done(Status::Ok());
  }

 private:
  void Park(Completion* done, char kind) {
    std::lock_guard lock(mu_);
    parked_.emplace_back(done, kind);
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<Completion*, char>> parked_;
};

void SendRequest(int fd, uint16_t type, uint64_t handle, uint64_t offset, uint32_t length) {
  uint8_t h[28];
  PutBe32(h, kRequestMagic);
  PutBe16(h + 4, 0);
  PutBe16(h + 6, type);
  PutBe64(h + 8, handle);
  PutBe64(h + 16, offset);
  PutBe32(h + 24, length);
  ASSERT_TRUE(WriteFull(fd, h, sizeof(h)));
}

struct Pair {
  int server = -1, client = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    server = fds[0];
    client = fds[1];
  }
  ~Pair() {
    close(server);
    close(client);
  }
};

TEST(NbdAsyncSessionTest, RepliesInCompletionOrder) {
  Pair p;
  ParkingBackend backend;
  BufferBudget budget(256ull << 20);
  std::thread session([&] { ASSERT_TRUE(NbdAsyncSession(p.server, &backend, &budget).Run().ok()); });
  SendRequest(p.client, kCmdFlush, 1, 0, 0);
  SendRequest(p.client, kCmdTrim, 2, 0, 4096);
  backend.WaitParked(2);
  backend.Release('t');  // the second first
  backend.Release('f');
  uint8_t reply[16];
  ASSERT_TRUE(ReadFull(p.client, reply, sizeof(reply)));
  EXPECT_EQ(GetBe64(reply + 8), 2u);
  ASSERT_TRUE(ReadFull(p.client, reply, sizeof(reply)));
  EXPECT_EQ(GetBe64(reply + 8), 1u);
  SendRequest(p.client, kCmdDisc, 3, 0, 0);
  session.join();
}

// Once a connection has ended (here after NBD_CMD_DISC), its client sees
// the end at once, while the server still holds the connection (until it
// reaps it, up to a second later). Clients that wait for the server's close
// after a disconnect, as nbdcopy does, waited that long for each connection.
TEST(NbdConnectionTest, TheClientSeesTheEndBeforeTheConnectionIsReaped) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  ParkingBackend backend;
  BufferBudget budget(256ull << 20);
  NbdServerOptions options;
  auto connection = std::make_unique<NbdConnection>(fds[0], &backend, &options, &budget, /*handshake=*/false);
  std::thread serving([&] { connection->Serve(); });
  SendRequest(fds[1], kCmdDisc, 1, 0, 0);
  serving.join();  // Serve has returned; the connection object lives on
  pollfd p{fds[1], POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1) << "no end of stream while the connection is held";
  char byte;
  EXPECT_EQ(recv(fds[1], &byte, 1, 0), 0);
  connection.reset();  // closes the server's end
  close(fds[1]);
}

// Runs on the session's reactor after everything it was given before, and
// one loop round later (so after the completions that round reaped).
class RoundMarker final : public cachecore::ReactorTask {
 public:
  explicit RoundMarker(cachecore::Reactor* reactor) : reactor_(reactor) {}
  void Run() override {
    if (++runs_ == 1) return reactor_->Post(this);
    std::lock_guard lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }

 private:
  cachecore::Reactor* reactor_;
  int runs_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

// Found by a review: a session paused on the bytes it holds, whose client
// goes away (a reply fails) while no receive is pending, waited for ever
// once the rest had completed.
TEST(NbdAsyncSessionTest, EndsWhenAReplyFailsWhilePaused) {
  Pair p;
  ParkingBackend backend;
  BufferBudget budget(1ull << 30);  // a share that lets the session pause on its own cap
  NbdAsyncSession session(p.server, &backend, &budget);
  auto done = std::async(std::launch::async, [&] { return session.Run().ok(); });
  constexpr uint32_t kBig = 32u << 20;  // four of these fill what a session may hold
  std::thread client([&] {
    SendRequest(p.client, kCmdFlush, 1, 0, 0);
    std::vector<uint8_t> payload(kBig);
    for (uint64_t i = 0; i < 4; ++i) {
      SendRequest(p.client, kCmdWrite, 10 + i, i * kBig, kBig);
      ASSERT_TRUE(WriteFull(p.client, payload.data(), payload.size()));
    }
  });
  backend.WaitParked(5);  // all taken: the session reads no more
  client.join();
  shutdown(p.server, SHUT_RDWR);  // as NbdConnection::Interrupt does
  backend.Release('f');           // its reply fails, alone
  RoundMarker marker(session.reactor());
  session.reactor()->Post(&marker);
  marker.Wait();
  backend.Release('w');  // the rest complete; nobody to answer
  ASSERT_EQ(done.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "the session never ended";
  EXPECT_TRUE(done.get());
}

// Reads one simple reply's header (and `data` bytes after it); its handle
// and error.
std::pair<uint64_t, uint32_t> ReadReply(int fd, uint32_t data = 0) {
  uint8_t head[16];
  EXPECT_TRUE(ReadFull(fd, head, sizeof(head)));
  EXPECT_EQ(GetBe32(head), kSimpleReplyMagic);
  std::vector<uint8_t> payload(data);
  if (data > 0 && GetBe32(head + 4) == 0) {
    EXPECT_TRUE(ReadFull(fd, payload.data(), data));
  }
  return {GetBe64(head + 8), GetBe32(head + 4)};
}

// A read or write past the advertised maximum is answered EINVAL (the
// write's payload read and dropped) and the connection goes on; it used to
// end the connection.
TEST(NbdAsyncSessionTest, OversizedRequestsAreAnsweredEinval) {
  Pair p;
  ParkingBackend backend;
  BufferBudget budget(256ull << 20);
  NbdAsyncSession session(p.server, &backend, &budget);
  auto done = std::async(std::launch::async, [&] { return session.Run().ok(); });
  constexpr uint32_t kOver = kNbdMaxPayload + 4096;
  std::thread client([&] {
    SendRequest(p.client, kCmdRead, 1, 0, kOver);
    SendRequest(p.client, kCmdWrite, 2, 0, kOver);
    std::vector<uint8_t> payload(kOver, 0x5a);
    ASSERT_TRUE(WriteFull(p.client, payload.data(), payload.size()));
    SendRequest(p.client, kCmdFlush, 3, 0, 0);
  });
  EXPECT_EQ(ReadReply(p.client), (std::pair<uint64_t, uint32_t>{1, kEinval}));
  EXPECT_EQ(ReadReply(p.client), (std::pair<uint64_t, uint32_t>{2, kEinval}));
  client.join();
  backend.WaitParked(1);  // the flush after them was read as a request
  EXPECT_EQ(budget.used(), 0u);
  backend.Release('f');
  EXPECT_EQ(ReadReply(p.client), (std::pair<uint64_t, uint32_t>{3, 0}));
  shutdown(p.client, SHUT_WR);
  ASSERT_EQ(done.wait_for(std::chrono::seconds(60)), std::future_status::ready);
}

// A connection holds at most a quarter of the budget, so that a few
// clients that read no replies cannot hold all of it.
TEST(BufferBudgetTest, ALimitAShareAndAGuarantee) {
  BufferBudget budget(256ull << 20);
  EXPECT_TRUE(budget.TryTake(32ull << 20, 0));
  EXPECT_TRUE(budget.TryTake(32ull << 20, 32ull << 20));    // 64 MiB: its share
  EXPECT_FALSE(budget.TryTake(4096, 64ull << 20));          // past its share
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(budget.TryTake(64ull << 20, 0));  // three more: all of it
  EXPECT_FALSE(budget.TryTake(2ull << 20, 0));              // past the limit, over the guarantee
  EXPECT_TRUE(budget.TryTake(1ull << 20, 0));               // a connection holding nothing: 1 MiB
  EXPECT_EQ(budget.used(), (256ull << 20) + (1ull << 20));
  budget.Give(budget.used());
  EXPECT_EQ(budget.used(), 0u);
}

// The server's buffer budget: a request that does not fit waits, read no
// further, until bytes come back; a connection that holds nothing may
// still take a small one, so one client cannot stop the others.
TEST(NbdAsyncSessionTest, RequestsWaitForTheServersBufferBudget) {
  Pair a, b;
  ParkingBackend backend;
  BufferBudget budget(8192);
  NbdAsyncSession first(a.server, &backend, &budget), second(b.server, &backend, &budget);
  auto first_done = std::async(std::launch::async, [&] { return first.Run().ok(); });
  auto second_done = std::async(std::launch::async, [&] { return second.Run().ok(); });
  SendRequest(a.client, kCmdRead, 1, 0, 8192);
  backend.WaitParked(1);
  SendRequest(a.client, kCmdRead, 2, 8192, 4096);  // 12 KiB would pass 8 KiB
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(backend.Parked(), 1u) << "a read past the budget went to the backend";
  SendRequest(b.client, kCmdRead, 3, 0, 4096);  // b holds nothing: it may
  backend.WaitParked(2);
  EXPECT_EQ(budget.used(), 8192u + 4096);
  backend.Release('r');  // 1 and 3 complete and give their bytes back
  std::pair<uint64_t, uint32_t> got = ReadReply(a.client, 8192);
  EXPECT_EQ(got.first, 1u);
  EXPECT_EQ(ReadReply(b.client, 4096).first, 3u);
  backend.WaitParked(1);  // 2 is taken now
  backend.Release('r');
  EXPECT_EQ(ReadReply(a.client, 4096).first, 2u);
  for (Pair* p : {&a, &b}) shutdown(p->client, SHUT_WR);
  ASSERT_EQ(first_done.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  ASSERT_EQ(second_done.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(budget.used(), 0u);
}

}  // namespace
}  // namespace shim
