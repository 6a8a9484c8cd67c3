// The adaptive policy (the default): on a synthetic trace whose phases
// favour different shapes of S3-FIFO, it switches, and by the end of each
// phase hits within 0.01 of the best shape held still over the same trace;
// stats' description says what it chose. Its shapes' own behaviour is
// S3-FIFO's (slot_structures_test, policy_candidates_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "policy/s3fifo.h"
#include "cachecore/policy/eviction_policy.h"
#include "policy_test_cache.h"

namespace cachecore {
namespace {

constexpr uint32_t kLines = 2048;

// A hot set of 0.7 x the lines (half the accesses) and new keys read twice
// in a row, never again: S3-FIFO T2 keeps the pairs out of main (0.67 of
// accesses hit), T1 lets them in over the hot set (0.53).
std::vector<uint64_t> HotSetAndPairs(uint64_t base, uint64_t accesses, std::mt19937_64& rng) {
  std::vector<uint64_t> keys;
  uint64_t fresh = base + 100 * kLines;
  while (keys.size() < accesses) {
    if (rng() % 2) {
      keys.push_back(base + rng() % (kLines * 7 / 10));
    } else {
      keys.push_back(fresh);
      keys.push_back(fresh++);
    }
  }
  keys.resize(accesses);
  return keys;
}

// Passes over 3 x the lines' keys, each pass in a new order: a small queue
// of 1 % (lines reach main by the ghost, and main keeps more of them) hits
// 0.21, the default 10 % 0.15.
std::vector<uint64_t> ShuffledPasses(uint64_t base, uint64_t accesses, std::mt19937_64& rng) {
  std::vector<uint64_t> keys, pass(3 * kLines);
  for (uint64_t i = 0; i < pass.size(); ++i) pass[i] = base + i;
  while (keys.size() < accesses) {
    std::shuffle(pass.begin(), pass.end(), rng);
    keys.insert(keys.end(), pass.begin(), pass.end());
  }
  keys.resize(accesses);
  return keys;
}

// Hits of `c` over each window [begin, end) of `keys`, run in order.
std::vector<double> WindowHitRatios(Cache& c, const std::vector<uint64_t>& keys,
                                    const std::vector<std::pair<size_t, size_t>>& windows) {
  std::vector<double> ratios(windows.size(), 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool hit = c.Access(keys[i]);
    for (size_t w = 0; w < windows.size(); ++w) {
      if (i >= windows[w].first && i < windows[w].second) ratios[w] += hit;
    }
  }
  for (size_t w = 0; w < windows.size(); ++w) ratios[w] /= windows[w].second - windows[w].first;
  return ratios;
}

// Phases of 300 decisions each, on new keys: hot set and pairs (T2
// wins), shuffled passes (a small queue of 1 % wins), hot set and pairs
// again. The adaptive policy is measured over the last quarter of each
// phase against every shape held still over the same trace.
TEST(AdaptivePolicyTest, PhasesThatFavourDifferentShapesAreFollowed) {
  const uint64_t phase = 300 * kLines;
  std::mt19937_64 rng(5);
  std::vector<uint64_t> keys = HotSetAndPairs(0, phase, rng);
  for (uint64_t k : ShuffledPasses(1'000'000'000, phase, rng)) keys.push_back(k);
  for (uint64_t k : HotSetAndPairs(2'000'000'000, phase, rng)) keys.push_back(k);
  std::vector<std::pair<size_t, size_t>> ends;
  for (uint64_t p = 1; p <= 3; ++p) ends.push_back({p * phase - phase / 4, p * phase});

  Cache adaptive(PolicyKind::kAdaptive, kLines);
  const std::vector<double> got = WindowHitRatios(adaptive, keys, ends);
  std::vector<double> best(ends.size(), 0);
  for (uint32_t small : {10u, 1u}) {
    for (uint32_t promote : {0u, 1u}) {
      for (uint32_t reach : {100u, 200u}) {
        const S3FifoShape shape{small, promote, reach};
        Cache held(kLines, [&](KeyOfSlot key_of) {
          return std::make_unique<S3Fifo>(kLines, shape, std::move(key_of), GhostLayout{200, 12});
        });
        const std::vector<double> r = WindowHitRatios(held, keys, ends);
        for (size_t w = 0; w < ends.size(); ++w) best[w] = std::max(best[w], r[w]);
      }
    }
  }
  for (size_t w = 0; w < ends.size(); ++w) {
    EXPECT_GE(got[w], best[w] - 0.01) << "phase " << w + 1 << ": " << got[w] << " against " << best[w];
  }
  // The shape it started with (small 10 %) loses the second phase by
  // far more than the margin: it switched, and ends with T2 for the pairs.
  const std::string state = adaptive.policy().Describe();
  EXPECT_EQ(state.find("adaptive: "), 0u) << state;
  EXPECT_EQ(state.find("(0 switches)"), std::string::npos) << state;
  EXPECT_NE(state.find("T2"), std::string::npos) << state;
}

// Before any decision it runs S3-FIFO's published shape, and says so.
TEST(AdaptivePolicyTest, StartsAsS3FifoT2AndSaysSo) {
  Cache c(PolicyKind::kAdaptive, 100);
  c.Hits(Range(0, 500));
  EXPECT_EQ(c.policy().Describe(), "adaptive: small 10 %, T2, ghost 1x (0 switches)");
}

}  // namespace
}  // namespace cachecore
