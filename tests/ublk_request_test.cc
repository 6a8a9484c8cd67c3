// The ublk front end's request decoding, without a kernel: descriptors laid
// out as the ublk driver fills them in (ublk_setup_iod: op_flags is the
// UBLK_IO_OP_* in its low byte ORed with the UBLK_IO_F_* flags, each at its
// own bit position) run on a backend that records what it is asked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../dm-target-shim/src/ublk_request.h"
#include "cachecore/devices/block_device.h"

namespace shim {
namespace {

// One call the backend received.
struct Call {
  std::string what;  // read, write, flush, trim
  uint64_t offset = 0, length = 0;
  bool fua = false;
  bool zeros = false;  // a write whose data was all zeros
};

class RecordingBackend : public BlockBackend {
 public:
  uint64_t size() const override { return 1ull << 30; }
  uint32_t preferred_block_size() const override { return 4096; }
  Status Read(uint64_t offset, void* buffer, uint64_t length) override {
    std::memset(buffer, 0x5a, length);
    return Record({"read", offset, length});
  }
  Status Write(uint64_t offset, const void* buffer, uint64_t length, bool fua) override {
    const auto* p = static_cast<const uint8_t*>(buffer);
    bool zeros = std::all_of(p, p + length, [](uint8_t b) { return b == 0; });
    return Record({"write", offset, length, fua, zeros});
  }
  Status Flush() override { return Record({"flush"}); }
  Status Trim(uint64_t offset, uint64_t length) override { return Record({"trim", offset, length}); }

  std::vector<Call> calls;
  bool fail = false;
  Status failure = Status::IoError("injected");  // what every call returns when fail is set

 private:
  Status Record(Call c) {
    calls.push_back(c);
    return fail ? failure : Status::Ok();
  }
};

ublksrv_io_desc Desc(uint32_t op_flags, uint64_t sector, uint32_t sectors) {
  ublksrv_io_desc d{};
  d.op_flags = op_flags;
  d.start_sector = sector;
  d.nr_sectors = sectors;
  return d;
}

// A tag's run that keeps what it would commit.
class RecordedRun final : public UblkRequestRun {
 public:
  void Finished(int32_t r) override {
    result = r;
    ++finished;
  }
  int32_t result = 0;
  int finished = 0;
};

class UblkRequestTest : public ::testing::Test {
 protected:
  // The backend answers at once, so the run has finished when Start returns.
  int32_t Run(uint32_t op_flags, uint64_t sector, uint32_t sectors) {
    ublksrv_io_desc d = Desc(op_flags, sector, sectors);
    RecordedRun run;
    run.Start(backend_, d, buf_.data());
    EXPECT_EQ(run.finished, 1);
    return run.result;
  }
  RecordingBackend backend_;
  cachecore::AlignedBuffer buf_{512 * 1024};
};

// The bug of issue 13 (item 4): FUA was read from op_flags >> 8, bit 21.
TEST_F(UblkRequestTest, FuaWriteReachesTheBackendAsFua) {
  std::memset(buf_.data(), 0x17, 8192);
  EXPECT_EQ(Run(UBLK_IO_OP_WRITE | UBLK_IO_F_FUA, 16, 16), 8192);
  ASSERT_EQ(backend_.calls.size(), 1u);
  EXPECT_EQ(backend_.calls[0].what, "write");
  EXPECT_EQ(backend_.calls[0].offset, 16u * 512);
  EXPECT_EQ(backend_.calls[0].length, 8192u);
  EXPECT_TRUE(backend_.calls[0].fua) << "a write with UBLK_IO_F_FUA reached the backend without FUA";
}

TEST_F(UblkRequestTest, DecodesFuaAtItsOwnBit) {
  EXPECT_TRUE(DecodeUblkRequest(Desc(UBLK_IO_OP_WRITE | UBLK_IO_F_FUA, 0, 8)).fua);
  EXPECT_FALSE(DecodeUblkRequest(Desc(UBLK_IO_OP_WRITE, 0, 8)).fua);
  // The other flags the driver sets are not FUA, and neither is bit 21,
  // where op_flags >> 8 would look for it.
  uint32_t others = UBLK_IO_F_FAILFAST_DEV | UBLK_IO_F_FAILFAST_TRANSPORT |
                    UBLK_IO_F_FAILFAST_DRIVER | UBLK_IO_F_META | UBLK_IO_F_NOUNMAP | UBLK_IO_F_SWAP;
  EXPECT_FALSE(DecodeUblkRequest(Desc(UBLK_IO_OP_WRITE | others, 0, 8)).fua);
  EXPECT_FALSE(DecodeUblkRequest(Desc(UBLK_IO_OP_WRITE | (UBLK_IO_F_FUA << 8), 0, 8)).fua);
  // Flags never change the operation.
  EXPECT_EQ(DecodeUblkRequest(Desc(UBLK_IO_OP_WRITE | UBLK_IO_F_FUA | others, 0, 8)).op, UBLK_IO_OP_WRITE);
}

TEST_F(UblkRequestTest, PlainWriteIsNotFua) {
  EXPECT_EQ(Run(UBLK_IO_OP_WRITE | UBLK_IO_F_FAILFAST_DEV, 8, 8), 4096);
  ASSERT_EQ(backend_.calls.size(), 1u);
  EXPECT_EQ(backend_.calls[0].what, "write");
  EXPECT_FALSE(backend_.calls[0].fua);
}

TEST_F(UblkRequestTest, ReadFillsTheBufferAndReturnsItsLength) {
  EXPECT_EQ(Run(UBLK_IO_OP_READ, 1, 3), 1536);
  ASSERT_EQ(backend_.calls.size(), 1u);
  EXPECT_EQ(backend_.calls[0].what, "read");
  EXPECT_EQ(backend_.calls[0].offset, 512u);
  EXPECT_EQ(backend_.calls[0].length, 1536u);
  EXPECT_EQ(buf_.data()[1535], 0x5a);
}

TEST_F(UblkRequestTest, FlushDiscardAndWriteZeroesReturnZero) {
  EXPECT_EQ(Run(UBLK_IO_OP_FLUSH, 0, 0), 0);
  EXPECT_EQ(Run(UBLK_IO_OP_DISCARD, 2048, 4096), 0);
  ASSERT_EQ(backend_.calls.size(), 2u);
  EXPECT_EQ(backend_.calls[0].what, "flush");
  EXPECT_EQ(backend_.calls[1].what, "trim");
  EXPECT_EQ(backend_.calls[1].offset, 2048u * 512);
  EXPECT_EQ(backend_.calls[1].length, 4096u * 512);
}

// Zeros in chunks; with FUA the last chunk carries it (the backend's FUA
// makes every completed write durable, the earlier chunks too), and a
// NOUNMAP flag changes nothing (writing zeros never unmaps).
TEST_F(UblkRequestTest, WriteZeroesCoversTheRangeAndHonoursFua) {
  const uint32_t sectors = (3u << 20) / 512 + 8;  // three chunks and a bit
  EXPECT_EQ(Run(UBLK_IO_OP_WRITE_ZEROES | UBLK_IO_F_FUA | UBLK_IO_F_NOUNMAP, 64, sectors), 0);
  ASSERT_GE(backend_.calls.size(), 2u);
  uint64_t next = 64 * 512;
  for (const Call& c : backend_.calls) {
    EXPECT_EQ(c.what, "write");
    EXPECT_TRUE(c.zeros);
    EXPECT_EQ(c.offset, next);
    next += c.length;
  }
  EXPECT_EQ(next, 64 * 512 + uint64_t{sectors} * 512);
  EXPECT_TRUE(backend_.calls.back().fua) << "write-zeroes with FUA did not end in a FUA write";
}

TEST_F(UblkRequestTest, WriteZeroesWithoutFuaIsNotFua) {
  EXPECT_EQ(Run(UBLK_IO_OP_WRITE_ZEROES, 0, 4096), 0);
  for (const Call& c : backend_.calls) EXPECT_FALSE(c.fua);
}

TEST_F(UblkRequestTest, UnknownOperationIsNotSupported) {
  EXPECT_EQ(Run(UBLK_IO_OP_WRITE_SAME, 0, 8), -EOPNOTSUPP);
  EXPECT_EQ(Run(0x7f, 0, 8), -EOPNOTSUPP);
  EXPECT_TRUE(backend_.calls.empty());
}

TEST_F(UblkRequestTest, BackendErrorsAreEio) {
  backend_.fail = true;
  EXPECT_EQ(Run(UBLK_IO_OP_READ, 0, 8), -EIO);
  EXPECT_EQ(Run(UBLK_IO_OP_WRITE | UBLK_IO_F_FUA, 0, 8), -EIO);
  EXPECT_EQ(Run(UBLK_IO_OP_FLUSH, 0, 0), -EIO);
  EXPECT_EQ(Run(UBLK_IO_OP_DISCARD, 0, 8), -EIO);
  EXPECT_EQ(Run(UBLK_IO_OP_WRITE_ZEROES, 0, 8), -EIO);
}

// The kernel gets the errno of what went wrong (ErrnoOf, shared with the
// NBD server), on every operation: a full volume is ENOSPC to the
// filesystem above, an operation the backend cannot do is EOPNOTSUPP; not
// EIO for everything.
TEST_F(UblkRequestTest, BackendErrorsReachTheKernelAsTheirOwnErrno) {
  struct Case {
    Status status;
    int32_t result;
  };
  const Case cases[] = {
      {Status::InvalidArgument("injected"), -EINVAL},
      {Status::OutOfRange("injected"), -ENOSPC},
      {Status::NoSpace("injected"), -ENOSPC},
      {Status::Busy("injected"), -EBUSY},
      {Status::NotSupported("injected"), -EOPNOTSUPP},
      {Status::IoError("injected"), -EIO},
      {Status::Corruption("injected"), -EIO},
      {Status::Mismatch("injected"), -EIO},
      {Status::NotFound("injected"), -EIO},
  };
  backend_.fail = true;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.status.ToString());
    backend_.failure = c.status;
    EXPECT_EQ(Run(UBLK_IO_OP_READ, 0, 8), c.result);
    EXPECT_EQ(Run(UBLK_IO_OP_WRITE | UBLK_IO_F_FUA, 0, 8), c.result);
    EXPECT_EQ(Run(UBLK_IO_OP_FLUSH, 0, 0), c.result);
    EXPECT_EQ(Run(UBLK_IO_OP_DISCARD, 0, 8), c.result);
    EXPECT_EQ(Run(UBLK_IO_OP_WRITE_ZEROES, 0, 8), c.result);
  }
}

// Write-zeroes stops at the first chunk that fails: nothing after it is
// written, and the request fails with that chunk's error.
TEST_F(UblkRequestTest, WriteZeroesStopsAtTheFirstFailedChunk) {
  backend_.fail = true;
  backend_.failure = Status::NoSpace("injected");
  EXPECT_EQ(Run(UBLK_IO_OP_WRITE_ZEROES | UBLK_IO_F_FUA, 0, (3u << 20) / 512), -ENOSPC);
  EXPECT_EQ(backend_.calls.size(), 1u);
}

// A backend whose asynchronous calls answer later, when the test says so:
// as the engine answers from its workers.
class LaterBackend : public RecordingBackend {
 public:
  bool asynchronous() const override { return true; }
  void WriteAsync(uint64_t offset, const void* buffer, uint64_t length, bool fua,
                  Completion* done) override {
    pending.push_back({done, Write(offset, buffer, length, fua)});
  }
  void ReadAsync(uint64_t offset, void* buffer, uint64_t length, Completion* done) override {
    pending.push_back({done, Read(offset, buffer, length)});
  }
  // Answers the oldest call, on another thread.
  void AnswerOne() {
    ASSERT_FALSE(pending.empty());
    auto [done, status] = pending.front();
    pending.erase(pending.begin());
    std::thread([done = done, status = status] { done->Done(status); }).join();
  }
  std::vector<std::pair<Completion*, Status>> pending;
};

TEST(UblkRequestRunTest, ARequestFinishesOnlyWhenTheBackendAnswers) {
  LaterBackend backend;
  cachecore::AlignedBuffer buf(4096);
  RecordedRun run;
  ublksrv_io_desc read = Desc(UBLK_IO_OP_READ, 8, 8);
  run.Start(backend, read, buf.data());
  EXPECT_EQ(run.finished, 0);
  backend.AnswerOne();
  EXPECT_EQ(run.finished, 1);
  EXPECT_EQ(run.result, 4096);
}

// Each chunk of a write of zeroes is asked for only once the one before it
// was answered, from the thread that answered it; the run finishes once.
TEST(UblkRequestRunTest, WriteZeroesAsksForChunksOneAfterAnother) {
  LaterBackend backend;
  cachecore::AlignedBuffer buf(4096);
  RecordedRun run;
  ublksrv_io_desc zeroes = Desc(UBLK_IO_OP_WRITE_ZEROES | UBLK_IO_F_FUA, 0, (3u << 20) / 512);
  run.Start(backend, zeroes, buf.data());
  for (size_t chunk = 1; chunk <= 3; ++chunk) {
    ASSERT_EQ(backend.pending.size(), 1u) << "chunk " << chunk;
    ASSERT_EQ(backend.calls.size(), chunk);
    EXPECT_EQ(backend.calls.back().offset, (chunk - 1) << 20);
    EXPECT_EQ(backend.calls.back().fua, chunk == 3);
    EXPECT_EQ(run.finished, 0);
    backend.AnswerOne();
  }
  EXPECT_TRUE(backend.pending.empty());
  EXPECT_EQ(run.finished, 1);
  EXPECT_EQ(run.result, 0);
}

TEST(ErrnoOfTest, OkIsZero) { EXPECT_EQ(ErrnoOf(Status::Ok()), 0); }

}  // namespace
}  // namespace shim
