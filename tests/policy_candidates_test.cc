// The eviction policies a replay can compare (adaptive, s3fifo, lru, arc, wtinylfu):
// each against hand-worked sequences (a scan, a loop larger than the cache,
// a hot set with noise), and all of them against the contract the engine
// relies on (a victim is a slot the policy tracks, each once; busy slots
// are passed over). The frequency sketch against exact counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include "../cache-core/src/policy/frequency_sketch.h"
#include "cachecore/policy/eviction_policy.h"
#include "policy_test_cache.h"

namespace cachecore {
namespace {

TEST(PolicyNamesTest, EveryNameRoundTripsAndOthersAreRefusedNamingTheChoices) {
  for (PolicyKind k : {PolicyKind::kAdaptive, PolicyKind::kS3Fifo, PolicyKind::kLru, PolicyKind::kArc, PolicyKind::kWTinyLfu}) {
    Result<PolicyKind> parsed = ParsePolicyName(PolicyName(k));
    ASSERT_TRUE(parsed.ok()) << PolicyName(k);
    EXPECT_EQ(*parsed, k);
  }
  Result<PolicyKind> bad = ParsePolicyName("clock");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("wtinylfu"), std::string::npos);
}

// LRU by hand: 3 lines; A B C, then A (hit), D evicts B (the least
// recently used), so B misses and evicts C, and A still hits.
TEST(LruPolicyTest, EvictsTheLeastRecentlyUsedByHand) {
  Cache c(PolicyKind::kLru, 3);
  EXPECT_EQ(c.Hits({1, 2, 3}), 0u);
  EXPECT_TRUE(c.Access(1));
  EXPECT_FALSE(c.Access(4));  // evicts 2
  EXPECT_FALSE(c.Access(2));  // evicts 3
  EXPECT_TRUE(c.Access(1));
  EXPECT_TRUE(c.Access(4));
  EXPECT_FALSE(c.Access(3));
}

// A hot set seen twice (ARC's T2, W-TinyLFU's frequent keys, S3-FIFO's
// main) outlives a scan of ten times the cache's size of keys seen once;
// LRU loses it.
TEST(PolicyScanTest, AHotSetSeenTwiceOutlivesAScanExceptUnderLru) {
  for (PolicyKind k : {PolicyKind::kAdaptive, PolicyKind::kS3Fifo, PolicyKind::kArc, PolicyKind::kWTinyLfu,
                       PolicyKind::kLru}) {
    Cache c(k, 100);
    const std::vector<uint64_t> hot = Range(0, 40);
    c.Hits(hot);
    EXPECT_EQ(c.Hits(hot), hot.size()) << PolicyName(k);
    c.Hits(hot);  // a third time: S3-FIFO T2 promotes after two hits
    EXPECT_EQ(c.Hits(Range(1000, 2000)), 0u) << PolicyName(k);
    const uint64_t kept = c.Hits(hot);
    if (k == PolicyKind::kLru) EXPECT_EQ(kept, 0u);
    else EXPECT_GE(kept, 36u) << PolicyName(k) << " kept " << kept << " of 40 hot lines";
  }
}

// Lines seen twice on arrival (W-TinyLFU: frequency 2 in probation; ARC:
// T2), then a scan of three times the cache in requests of 8 lines, each request's lines busy while
// it runs (the engine's stripes): a busy line is passed over, not
// promoted, so the scan does not reach them. (W-TinyLFU once moved a busy
// window line into probation without a duel, and with a window of one
// line kept none of the 40.)
TEST(PolicyScanTest, BusyLinesOfAScanAreNotPromotedOverLinesSeenTwice) {
  for (PolicyKind k : {PolicyKind::kArc, PolicyKind::kWTinyLfu}) {
    Cache c(k, 100);
    c.HoldLastInserted(8);
    for (uint64_t key = 0; key < 40; ++key) c.Hits({key, key});
    // Three times the cache: short of the 10 x lines accesses that age
    // W-TinyLFU's sketch (a longer scan halves what it knows of them).
    EXPECT_EQ(c.Hits(Range(1000, 1300)), 0u) << PolicyName(k);
    const uint64_t kept = c.Hits(Range(0, 40));
    EXPECT_GE(kept, 30u) << PolicyName(k) << " kept " << kept << " of 40 lines seen twice";
  }
}

// A loop over 1.5 times the cache: LRU hits nothing, ever, and neither
// does ARC (every key is seen once a pass, so T1 is the whole cache and
// leaves no room for B1's ghosts: the paper's case IV evicts without a
// ghost); S3-FIFO (its ghost sends returning keys to main) and W-TinyLFU
// (the sketch keeps the old lines against new ones) keep part of it.
TEST(PolicyLoopTest, ALoopLargerThanTheCacheDefeatsLruAndArc) {
  const std::vector<uint64_t> loop = Range(0, 150);
  for (PolicyKind k : {PolicyKind::kLru, PolicyKind::kArc, PolicyKind::kWTinyLfu, PolicyKind::kS3Fifo,
                       PolicyKind::kAdaptive}) {
    Cache c(k, 100);
    uint64_t hits = 0;
    for (int pass = 0; pass < 20; ++pass) hits += c.Hits(loop);
    if (k == PolicyKind::kLru || k == PolicyKind::kArc) EXPECT_EQ(hits, 0u) << PolicyName(k);
    else EXPECT_GT(hits, 20u * 150 / 4) << PolicyName(k) << " hit " << hits;
  }
}

// A hot set of 50 keys taking 80 % of the accesses, the rest noise drawn
// from a million keys: a cache of 100 lines should hold the hot set, and
// the policies made for it beat LRU.
TEST(PolicyNoiseTest, AHotSetWithNoiseIsKept) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 200000; ++i) keys.push_back(rng() % 10 < 8 ? rng() % 50 : 1000 + rng() % 1000000);
  std::unordered_map<int, uint64_t> hits;
  for (PolicyKind k : {PolicyKind::kLru, PolicyKind::kArc, PolicyKind::kWTinyLfu, PolicyKind::kS3Fifo,
                       PolicyKind::kAdaptive}) {
    Cache c(k, 100);
    hits[static_cast<int>(k)] = c.Hits(keys);
  }
  const uint64_t hot_accesses = 200000 * 8 / 10, lru = hits[static_cast<int>(PolicyKind::kLru)];
  for (PolicyKind k : {PolicyKind::kArc, PolicyKind::kWTinyLfu, PolicyKind::kS3Fifo, PolicyKind::kAdaptive}) {
    const uint64_t h = hits[static_cast<int>(k)];
    EXPECT_GT(h, hot_accesses * 97 / 100) << PolicyName(k);
    EXPECT_GT(h, lru) << PolicyName(k);
  }
}

// The contract the engine relies on, under random inserts, hits, removals
// and victims with some slots busy: a victim is a tracked slot that is not
// busy; with every slot busy there is none; each tracked slot comes out
// exactly once when the cache is emptied.
TEST(PolicyContractTest, VictimsAreTrackedUsableSlotsEachOnce) {
  for (PolicyKind k : {PolicyKind::kAdaptive, PolicyKind::kS3Fifo, PolicyKind::kLru, PolicyKind::kArc,
                       PolicyKind::kWTinyLfu}) {
    SCOPED_TRACE(PolicyName(k));
    constexpr uint32_t kSlots = 64;
    std::vector<uint64_t> key(kSlots);
    auto policy = NewEvictionPolicy(k, kSlots, 1, [&](uint32_t s) { return key[s]; });
    std::set<uint32_t> tracked;
    std::mt19937_64 rng(11);
    uint64_t next_key = 0;
    for (uint32_t s = 0; s < kSlots; ++s) {
      key[s] = next_key++;
      policy->OnInsert(s, key[s]);
      tracked.insert(s);
    }
    for (int step = 0; step < 50000; ++step) {
      const uint32_t s = static_cast<uint32_t>(rng() % kSlots);
      const uint32_t op = static_cast<uint32_t>(rng() % 4);
      if (op == 0) {
        policy->OnHit(s);
      } else if (op == 1) {
        policy->OnRemove(s);
        tracked.erase(s);
        if (rng() % 2) {
          key[s] = next_key++ % 200;  // keys come back: the ghosts matter
          policy->OnInsert(s, key[s]);
          tracked.insert(s);
        }
      } else {
        const uint32_t busy = static_cast<uint32_t>(rng() % kSlots);
        std::optional<uint32_t> v =
            policy->PickVictim(next_key % 200, [&](uint32_t c) { return c != busy; }, UINT64_MAX, UINT64_MAX);
        const bool any_usable = tracked.size() > (tracked.count(busy) ? 1u : 0u);
        // W-TinyLFU may keep the incoming line out (its admission) instead.
        if (k != PolicyKind::kWTinyLfu) {
          ASSERT_EQ(v.has_value(), any_usable) << "step " << step;
        } else if (!any_usable) {
          ASSERT_FALSE(v.has_value()) << "step " << step;
        }
        if (!v) continue;
        ASSERT_EQ(tracked.count(*v), 1u) << "a victim the policy no longer tracks";
        ASSERT_NE(*v, busy) << "a busy slot chosen";
        policy->OnRemove(*v);
        key[*v] = next_key++ % 200;
        policy->OnInsert(*v, key[*v]);
      }
    }
    EXPECT_FALSE(policy->PickVictim(0, [](uint32_t) { return false; }, UINT64_MAX, UINT64_MAX).has_value());
    std::set<uint32_t> seen;
    while (auto v = policy->PickVictim(0, [](uint32_t) { return true; }, UINT64_MAX, UINT64_MAX)) {
      ASSERT_TRUE(seen.insert(*v).second) << "slot " << *v << " chosen twice";
      policy->OnRemove(*v);
    }
    EXPECT_EQ(seen, tracked);
  }
}

// A line W-TinyLFU keeps out (its whole window busy, its count not above
// main's victim's) has each later miss counted all the same, so it gets
// in once it has been asked for more often than the victim. (Its first
// refusal once left it counted for good: refused forever.)
TEST(WTinyLfuTest, EveryMissOfALineKeptOutIsCounted) {
  constexpr uint32_t kSlots = 100;
  std::vector<uint64_t> key(kSlots);
  auto policy = NewEvictionPolicy(PolicyKind::kWTinyLfu, kSlots, 1, [&](uint32_t s) { return key[s]; });
  for (uint32_t s = 0; s < kSlots; ++s) {  // main's lines seen twice, the window's (slot 99) once
    key[s] = s;
    policy->OnInsert(s, s);
    if (s + 1 < kSlots) policy->OnHit(s);
  }
  auto window_busy = [](uint32_t s) { return s != kSlots - 1; };
  const uint64_t kOutsider = 5000;
  EXPECT_FALSE(policy->PickVictim(kOutsider, window_busy, UINT64_MAX, UINT64_MAX).has_value());  // 1 <= 2
  EXPECT_FALSE(policy->PickVictim(kOutsider, window_busy, UINT64_MAX, UINT64_MAX).has_value());  // 2 <= 2
  std::optional<uint32_t> v = policy->PickVictim(kOutsider, window_busy, UINT64_MAX, UINT64_MAX);  // 3 > 2
  ASSERT_TRUE(v.has_value()) << "the third miss is not counted";
  EXPECT_NE(*v, kSlots - 1);
}

// ARC: a key whose ghost PickVictim took (it moves p first) is put back
// when no victim could be had, so its next miss still finds it there and
// moves p to favour T1, whose lines then stay. (It was lost once
// PickVictim ran for another key: a T1 line went instead.)
TEST(ArcTest, AGhostTakenForAMissWithoutAVictimIsKept) {
  std::vector<uint64_t> key(4);
  auto policy = NewEvictionPolicy(PolicyKind::kArc, 4, 1, [&](uint32_t s) { return key[s]; });
  auto all = [](uint32_t) { return true; };
  auto none = [](uint32_t) { return false; };
  auto place = [&](uint32_t s, uint64_t k) {
    key[s] = k;
    policy->OnInsert(s, k);
  };
  auto evict_for = [&](uint64_t k) {
    std::optional<uint32_t> v = policy->PickVictim(k, all, UINT64_MAX, UINT64_MAX);
    EXPECT_TRUE(v.has_value());
    policy->OnRemove(*v);
    place(*v, k);
    return *v;
  };
  enum : uint64_t { A = 1, B, C, D, X, Y };
  place(0, A);
  place(1, B);
  place(2, X);
  place(3, Y);
  policy->OnHit(2);  // X and Y to T2; T1 holds A and B
  policy->OnHit(3);
  EXPECT_EQ(evict_for(C), 0u);  // A, T1's oldest, goes: its ghost in B1
  // A's miss moves p to 1; B, T1's oldest, is refused (to T1's head).
  EXPECT_FALSE(policy->PickVictim(A, none, 1, UINT64_MAX).has_value());
  EXPECT_EQ(evict_for(D), 0u);  // C goes (T1 over p)
  // A's ghost again: p to 2, so T2's oldest (X) goes, not T1's.
  EXPECT_EQ(evict_for(A), 2u) << "A's ghost was lost";
}

// Estimates never fall below the true count (to the cap of 15) and are
// exact for a few keys in a wide sketch; aging halves them.
TEST(FrequencySketchTest, EstimatesBoundTheCountsAndAgingHalvesThem) {
  FrequencySketch sketch(1024);
  std::unordered_map<uint64_t, uint32_t> counts;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 5000; ++i) {  // under the 10 x 1024 increments that age it
    const uint64_t key = rng() % 2000;
    sketch.Increment(key);
    ++counts[key];
  }
  for (const auto& [key, n] : counts) ASSERT_GE(sketch.Estimate(key), std::min<uint32_t>(n, 15)) << key;
  // 10 x 1024 increments age it: 12 of one key, the rest of another.
  FrequencySketch aging(1024);
  for (int i = 0; i < 12; ++i) aging.Increment(42);
  EXPECT_EQ(aging.Estimate(42), 12u);
  for (int i = 0; i < 10 * 1024 - 13; ++i) aging.Increment(7);
  EXPECT_EQ(aging.Estimate(42), 12u);
  EXPECT_EQ(aging.Estimate(7), 15u);
  aging.Increment(7);
  EXPECT_EQ(aging.Estimate(42), 6u);
  EXPECT_EQ(aging.Estimate(7), 7u);
}

}  // namespace
}  // namespace cachecore
