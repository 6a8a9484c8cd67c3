// FaultDevice: each injected fault does what it says, and nothing else.
#include <gtest/gtest.h>

#include <cstring>

#include "support/fault_device.h"
#include "cachecore/devices/memory_device.h"

namespace cachecore {
namespace {

class FaultDeviceTest : public ::testing::Test {
 protected:
  void Make(bool volatile_cache) {
    fault_ = std::make_unique<FaultDevice>(mem_.get(), volatile_cache, 7);
  }
  void WriteByte(uint64_t off, uint8_t v) {
    std::memset(buf_.data(), v, 4096);
    ASSERT_TRUE(fault_->Write(off, buf_.data(), 4096).ok());
  }
  uint8_t ReadByte(BlockDevice& d, uint64_t off) {
    EXPECT_TRUE(d.Read(off, buf_.data(), 4096).ok());
    return buf_.data()[0];
  }
  std::unique_ptr<BlockDevice> mem_ = NewMemoryDevice(1 << 20, "m");
  std::unique_ptr<FaultDevice> fault_;
  AlignedBuffer buf_{65536};
};

TEST_F(FaultDeviceTest, FailsExactlyTheNthMatchingOperation) {
  Make(false);
  fault_->FailNth(kFaultWrite, 3);
  EXPECT_TRUE(fault_->Write(0, buf_.data(), 4096).ok());
  EXPECT_TRUE(fault_->Read(0, buf_.data(), 4096).ok());  // reads do not count
  EXPECT_TRUE(fault_->Write(0, buf_.data(), 4096).ok());
  EXPECT_EQ(fault_->Write(0, buf_.data(), 4096).code(), StatusCode::kIoError);
  EXPECT_TRUE(fault_->Write(0, buf_.data(), 4096).ok());
  EXPECT_EQ(fault_->injected_failures(), 1u);
}

TEST_F(FaultDeviceTest, FailsAtRoughlyTheRate) {
  Make(false);
  fault_->FailAtRate(kFaultRead, 0.25);
  int failed = 0;
  for (int i = 0; i < 2000; ++i) failed += fault_->Read(0, buf_.data(), 512).ok() ? 0 : 1;
  EXPECT_GT(failed, 350);
  EXPECT_LT(failed, 650);
}

TEST_F(FaultDeviceTest, FailsAlwaysUntilCleared) {
  Make(false);
  fault_->FailAlways(kFaultFlush);
  EXPECT_FALSE(fault_->Flush().ok());
  EXPECT_FALSE(fault_->Flush().ok());
  EXPECT_TRUE(fault_->Read(0, buf_.data(), 512).ok());
  fault_->ClearFaults();
  EXPECT_TRUE(fault_->Flush().ok());
}

TEST_F(FaultDeviceTest, PowerCutDropsUnflushedWrites) {
  Make(true);
  WriteByte(0, 1);
  ASSERT_TRUE(fault_->Flush().ok());
  WriteByte(0, 2);
  WriteByte(4096, 3);
  EXPECT_EQ(ReadByte(*fault_, 0), 2);  // visible before the cut
  EXPECT_EQ(ReadByte(*mem_, 0), 1);    // but not on the medium
  fault_->PowerCut(PowerCutMode::kDropUnsynced);
  EXPECT_EQ(ReadByte(*fault_, 0), 1);
  EXPECT_EQ(ReadByte(*fault_, 4096), 0);
}

TEST_F(FaultDeviceTest, KeepModeLandsEverything) {
  Make(true);
  WriteByte(0, 5);
  fault_->PowerCut(PowerCutMode::kKeepUnsynced);
  EXPECT_EQ(ReadByte(*mem_, 0), 5);
}

TEST_F(FaultDeviceTest, TearLandsWholeFourKiBUnitsOnly) {
  Make(true);
  bool saw_partial = false;
  for (int round = 0; round < 50 && !saw_partial; ++round) {
    std::memset(buf_.data(), 0, 65536);
    ASSERT_TRUE(mem_->Write(0, buf_.data(), 65536).ok());
    std::memset(buf_.data(), 0xEE, 65536);
    ASSERT_TRUE(fault_->Write(0, buf_.data(), 65536).ok());
    fault_->PowerCut(PowerCutMode::kTear);
    ASSERT_TRUE(mem_->Read(0, buf_.data(), 65536).ok());
    size_t landed = 0;
    while (landed < 65536 && buf_.data()[landed] == 0xEE) ++landed;
    EXPECT_EQ(landed % 4096, 0u);
    for (size_t i = landed; i < 65536; ++i) ASSERT_EQ(buf_.data()[i], 0) << "not a prefix";
    saw_partial = landed > 0 && landed < 65536;
  }
  EXPECT_TRUE(saw_partial);
}

}  // namespace
}  // namespace cachecore
