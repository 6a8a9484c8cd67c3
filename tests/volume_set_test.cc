// VolumeSet: requests in the line space reach the right origin at its own
// offset, whichever way they are submitted, and nothing reaches a device
// for a range outside every volume.
#include "engine/volume_set.h"

#include <gtest/gtest.h>

#include <cstring>

#include "cachecore/devices/memory_device.h"

namespace cachecore {
namespace {

constexpr uint64_t kMiB = 1 << 20;

struct Waiter final : IoCompletion {
  bool done = false;
  uint64_t offset_seen = 0;
  void IoDone(AsyncIo& io) override {
    done = true;
    offset_seen = io.request.offset;
  }
};

class VolumeSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = NewMemoryDevice(4 * kMiB, "a");
    b_ = NewMemoryDevice(2 * kMiB, "b");
    set_.Publish(0, 0, a_.get());
    base_b_ = set_.FreeBase(b_->size_bytes(), kMiB);
    set_.Publish(1, base_b_, b_.get());
  }
  std::unique_ptr<BlockDevice> a_, b_;
  VolumeSet set_;
  uint64_t base_b_ = 0;
};

TEST_F(VolumeSetTest, BasesLeaveAGapAndTheSizeIsTheLastEnd) {
  EXPECT_EQ(base_b_, 5 * kMiB);  // 4 MiB of a, then a whole alignment unit clear
  EXPECT_EQ(set_.size_bytes(), 7 * kMiB);
  EXPECT_EQ(set_.Find(4 * kMiB - 4096, 4096)->id, 0u);
  EXPECT_EQ(set_.Find(4 * kMiB, 4096), nullptr);  // the gap
  EXPECT_EQ(set_.Find(4 * kMiB - 4096, 8192), nullptr);  // across a's end
  EXPECT_EQ(set_.Find(base_b_ + 4096, 4096)->id, 1u);
  EXPECT_EQ(set_.FreeId(), 2u);
}

TEST_F(VolumeSetTest, SynchronousRequestsReachTheirOriginAtItsOffset) {
  AlignedBuffer data(8192), back(8192);
  std::memset(data.data(), 0xab, 4096);
  std::memset(data.data() + 4096, 0xcd, 4096);
  IoRequest writes[2] = {{IoOp::kWrite, 4096, 4096, data.data(), Status()},
                         {IoOp::kWrite, base_b_ + 8192, 4096, data.data() + 4096, Status()}};
  ASSERT_TRUE(set_.SubmitAndWait(writes).ok());
  EXPECT_EQ(writes[1].offset, base_b_ + 8192);  // the caller's request as it was
  ASSERT_TRUE(a_->Read(4096, back.data(), 4096).ok());
  EXPECT_EQ(back.data()[0], 0xab);
  ASSERT_TRUE(b_->Read(8192, back.data(), 4096).ok());
  EXPECT_EQ(back.data()[0], 0xcd);
  ASSERT_TRUE(set_.Read(base_b_ + 8192, back.data(), 4096).ok());
  EXPECT_EQ(back.data()[0], 0xcd);
  EXPECT_TRUE(set_.Flush().ok());
}

TEST_F(VolumeSetTest, SubmittedRequestsCompleteWithTheCallersOffset) {
  AlignedBuffer data(4096);
  std::memset(data.data(), 0x5a, 4096);
  Waiter waiter;
  AsyncIo io;
  io.request = {IoOp::kWrite, base_b_ + 4096, 4096, data.data(), Status()};
  io.done = &waiter;
  set_.Submit(io);
  ASSERT_TRUE(waiter.done);
  EXPECT_TRUE(io.request.status.ok());
  EXPECT_EQ(waiter.offset_seen, base_b_ + 4096);
  EXPECT_EQ(io.done, &waiter);
  AlignedBuffer back(4096);
  ASSERT_TRUE(b_->Read(4096, back.data(), 4096).ok());
  EXPECT_EQ(back.data()[0], 0x5a);
}

TEST_F(VolumeSetTest, OutsideEveryVolumeFailsAndTouchesNothing) {
  AlignedBuffer data(4096);
  std::memset(data.data(), 0x11, 4096);
  EXPECT_EQ(set_.Write(4 * kMiB, data.data(), 4096).code(), StatusCode::kOutOfRange);
  Waiter waiter;
  AsyncIo io;
  io.request = {IoOp::kWrite, base_b_ - 4096, 8192, data.data(), Status()};
  io.done = &waiter;
  set_.Submit(io);
  ASSERT_TRUE(waiter.done);
  EXPECT_EQ(io.request.status.code(), StatusCode::kOutOfRange);
  AlignedBuffer back(4096);
  ASSERT_TRUE(b_->Read(0, back.data(), 4096).ok());
  EXPECT_EQ(back.data()[0], 0);
}

TEST_F(VolumeSetTest, AWithdrawnVolumeTakesNoRequestAndItsSpaceIsReused) {
  set_.Withdraw(0);
  AlignedBuffer data(4096);
  EXPECT_EQ(set_.Write(0, data.data(), 4096).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(set_.FreeId(), 0u);
  EXPECT_EQ(set_.FreeBase(2 * kMiB, kMiB), 0u);       // fits before b with a gap
  EXPECT_EQ(set_.FreeBase(5 * kMiB, kMiB), 8 * kMiB);  // does not: after b
  EXPECT_EQ(set_.size_bytes(), 7 * kMiB);
}

}  // namespace
}  // namespace cachecore
