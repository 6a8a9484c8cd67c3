#include "support/stamped_rig.h"

#include <mutex>
#include <string>
#include <vector>

#include "cachecore/engine/steps.h"

namespace cachecore::testing {

namespace {
constexpr uint64_t kBlock = 4096;
constexpr uint64_t kSectorsPerBlock = kBlock / 512;

// One action per step, each run once; steps are reached on any thread.
struct StepAction {
  std::string step;
  std::function<void()> action;
  bool fired = false;
};
std::mutex g_mu;
std::vector<StepAction> g_actions;

void RunStepAction(const char* step) {
  std::function<void()> action;
  {
    std::lock_guard lock(g_mu);
    for (StepAction& a : g_actions) {
      if (a.fired || a.step != step) continue;
      a.fired = true;
      action = a.action;
    }
  }
  if (action) action();  // unlocked: it may reach another step
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
  {
    std::lock_guard lock(g_mu);
    std::erase_if(g_actions, [&](const StepAction& a) { return a.step == step; });
    g_actions.push_back({step, std::move(action), false});
  }
  SetStepObserver(RunStepAction);
}

void ClearStepAction() {
  SetStepObserver(nullptr);
  std::lock_guard lock(g_mu);
  g_actions.clear();
}

std::string PowerCutModeName(PowerCutMode mode) {
  switch (mode) {
    case PowerCutMode::kDropUnsynced: return "Drop";
    case PowerCutMode::kTear: return "Tear";
    default: return "Keep";
  }
}

}  // namespace cachecore::testing
