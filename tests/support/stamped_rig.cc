#include "support/stamped_rig.h"

#include <string>

#include "cachecore/steps.h"

namespace cachecore::testing {

namespace {
constexpr uint64_t kBlock = 4096;
constexpr uint64_t kSectorsPerBlock = kBlock / 512;

std::string g_step;
std::function<void()> g_action;
bool g_fired = false;

void RunStepAction(const char* step) {
  if (g_fired || !g_action || g_step != step) return;
  g_fired = true;
  g_action();
}
}  // namespace

void StampedRig::WriteStamped(uint64_t block, uint64_t id, bool fua) {
  AlignedBuffer buf(kBlock);
  for (uint64_t s = 0; s < kSectorsPerBlock; ++s) {
    StampSector(buf.data() + s * 512, id, block * kSectorsPerBlock + s);
  }
  Status st = engine().Write(block * kBlock, buf.data(), kBlock, fua);
  ASSERT_TRUE(st.ok()) << "write of block " << block << ": " << st.ToString();
}

uint64_t StampedRig::ReadStamped(uint64_t block) {
  AlignedBuffer buf(kBlock);
  Status st = engine().Read(block * kBlock, buf.data(), kBlock);
  EXPECT_TRUE(st.ok()) << "read of block " << block << ": " << st.ToString();
  std::optional<uint64_t> first = ReadStamp(buf.data(), block * kSectorsPerBlock);
  EXPECT_TRUE(first.has_value()) << "block " << block << " holds foreign data";
  for (uint64_t s = 1; s < kSectorsPerBlock && first; ++s) {
    EXPECT_EQ(ReadStamp(buf.data() + s * 512, block * kSectorsPerBlock + s), first)
        << "torn block " << block;
  }
  return first.value_or(UINT64_MAX);
}

uint64_t StampedRig::OriginStampedAfterDetach(uint64_t block) {
  Status st = engine().Detach();
  EXPECT_TRUE(st.ok()) << st.ToString();
  AlignedBuffer buf(kBlock);
  st = origin().Read(block * kBlock, buf.data(), kBlock);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return ReadStamp(buf.data(), block * kSectorsPerBlock).value_or(UINT64_MAX);
}

void OnStepOnce(const char* step, std::function<void()> action) {
  g_step = step;
  g_action = std::move(action);
  g_fired = false;
  SetStepObserver(RunStepAction);
}

void ClearStepAction() {
  SetStepObserver(nullptr);
  g_action = nullptr;
  g_step.clear();
}

std::string PowerCutModeName(PowerCutMode mode) {
  switch (mode) {
    case PowerCutMode::kDropUnsynced: return "Drop";
    case PowerCutMode::kTear: return "Tear";
    default: return "Keep";
  }
}

}  // namespace cachecore::testing
