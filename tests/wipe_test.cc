// WipeDevice (cachectl detach --wipe): afterwards every byte of the device
// reads zero, whether the device discards, cannot discard, or claims to
// discard and keeps the data.
#include <gtest/gtest.h>

#include <cstring>

#include "cachecore/devices/memory_device.h"
#include "cachecore/devices/wipe.h"

namespace cachecore {
namespace {

constexpr uint64_t kSize = 24 << 20;

// Forwards to a memory device; discards as `kind` says.
class DiscardVariant : public BlockDevice {
 public:
  enum Kind { kNone, kIgnored };
  DiscardVariant(BlockDevice* target, Kind kind) : target_(target), kind_(kind) {}
  uint64_t size_bytes() const override { return target_->size_bytes(); }
  std::string identity() const override { return "variant"; }
  bool supports_discard() const override { return kind_ == kIgnored; }
  Status SubmitAndWait(std::span<IoRequest> requests) override {
    for (IoRequest& r : requests) {
      if (r.op != IoOp::kDiscard) continue;
      r.status = Status::Ok();  // kIgnored: says yes, keeps the data
      r.op = IoOp::kFlush;      // harmless stand-in for the target
    }
    return target_->SubmitAndWait(requests);
  }

 private:
  BlockDevice* target_;
  Kind kind_;
};

void FillWithData(BlockDevice& d) {
  AlignedBuffer b(1 << 20);
  std::memset(b.data(), 0xAB, b.size());
  for (uint64_t at = 0; at < kSize; at += 3 << 20) ASSERT_TRUE(d.Write(at, b.data(), b.size()).ok());
}

bool AllZero(BlockDevice& d) {
  AlignedBuffer b(kSize);
  if (!d.Read(0, b.data(), kSize).ok()) return false;
  for (uint64_t i = 0; i < kSize; ++i) {
    if (b.data()[i] != 0) return false;
  }
  return true;
}

TEST(WipeTest, ADeviceThatDiscards) {
  auto mem = NewMemoryDevice(kSize, "ssd");
  FillWithData(*mem);
  Result<WipeReport> r = WipeDevice(mem.get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->discarded);
  EXPECT_EQ(r->bytes_overwritten, 0u);
  EXPECT_TRUE(AllZero(*mem));
}

TEST(WipeTest, ADeviceWithoutDiscardIsOverwritten) {
  auto mem = NewMemoryDevice(kSize, "ssd");
  FillWithData(*mem);
  DiscardVariant dev(mem.get(), DiscardVariant::kNone);
  Result<WipeReport> r = WipeDevice(&dev);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->discarded);
  EXPECT_GT(r->bytes_overwritten, 0u);
  EXPECT_TRUE(AllZero(*mem));
}

TEST(WipeTest, ADiscardThatKeepsTheDataIsCaught) {
  auto mem = NewMemoryDevice(kSize, "ssd");
  FillWithData(*mem);
  DiscardVariant dev(mem.get(), DiscardVariant::kIgnored);
  Result<WipeReport> r = WipeDevice(&dev);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->bytes_overwritten, 0u);
  EXPECT_TRUE(AllZero(*mem));
}

}  // namespace
}  // namespace cachecore
