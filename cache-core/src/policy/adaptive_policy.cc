// The adaptive policy (cachectl's default): a live S3-FIFO whose shape
// follows whichever of eight shapes has served the workload best. Each
// shape runs as a miniature cache over a spatial sample of the keys
// (ShadowCache: SHARDS). Every period of sampled accesses each shadow's
// hits join its score, which fades by 1 % a period (a horizon of about a
// hundred periods); the live cache takes the leader's shape when it leads
// the current one by 2 % and by hits worth 1 % of a period. A change of
// shape moves no line: it steers the evictions and promotions that follow.
//
// Why shapes of one S3-FIFO rather than whole other policies: switching
// between ARC, W-TinyLFU and S3-FIFO would rebuild the policy's state
// under the slot table's lock (a stall of a second at ten million lines),
// and ARC's ghosts or W-TinyLFU's lists cost 2-8 times S3-FIFO's bytes a
// line. Why a slow score with a margin: a switch has a cost the shadows do
// not see (the live cache's queues were filled under the old shape), and
// on traces whose phases alternate, following each phase's leader loses
// to every shape held still (docs/design.md, "The adaptive policy").
#include <algorithm>
#include <memory>
#include <vector>

#include "base/mix64.h"
#include "cachecore/policy/eviction_policy.h"
#include "policy/s3fifo.h"
#include "policy/shadow_cache.h"

namespace cachecore {

namespace {

// Every combination of the three choices; the first is where the live
// cache starts (S3-FIFO's published shape).
constexpr S3FifoShape kShapes[] = {
    {10, 1, 100}, {10, 0, 100}, {1, 0, 100}, {1, 1, 100},
    {10, 1, 200}, {1, 0, 200}, {1, 1, 200}, {10, 0, 200},
};
constexpr size_t kShapeCount = std::size(kShapes);

// Every shape's ghost: twice main's lines in 12-bit fingerprints (1.5
// bytes a key: 2.7 a line, where plain S3-FIFO's is 1.8).
constexpr GhostLayout kGhost{200, 12};
// The shadows' size: a larger cache is sampled at kShadowLines / lines.
constexpr uint32_t kShadowLines = 4096;
constexpr double kScoreDecay = 0.99;   // per period
constexpr double kSwitchMargin = 0.02; // the leader's score over the current one's
constexpr double kMinLead = 0.01;      // and by at least this share of a period's accesses

class Adaptive : public EvictionPolicy {
 public:
  Adaptive(uint32_t capacity, KeyOfSlot key_of)
      : key_of_(key_of),
        live_(capacity, kShapes[0], std::move(key_of), kGhost),
        threshold_(capacity <= kShadowLines
                       ? UINT64_MAX
                       : static_cast<uint64_t>(static_cast<double>(kShadowLines) / capacity * 18446744073709551616.0)),
        period_(std::max<uint32_t>(1024, std::min(kShadowLines, capacity))) {
    const uint32_t shadow_lines = std::max<uint32_t>(2, std::min(kShadowLines, capacity));
    for (const S3FifoShape& shape : kShapes) {
      shadows_.push_back(std::make_unique<ShadowCache>(shadow_lines, shape, kGhost));
    }
    scores_.assign(kShapeCount, 0);
  }

  void OnInsert(uint32_t slot, uint64_t key) override {
    if (observed_ != key) Observe(key);  // PickVictim saw this miss already
    observed_ = kNothingObserved;
    live_.OnInsert(slot, key);
  }

  // Loaded at start or unpinned: not an access, so the shadows see nothing.
  void OnRestore(uint32_t slot, uint64_t key) override { live_.OnInsert(slot, key); }

  void OnHit(uint32_t slot) override {
    Observe(key_of_(slot));
    live_.OnHit(slot);
  }

  void OnRemove(uint32_t slot) override { live_.OnRemove(slot); }

  std::optional<uint32_t> PickVictim(uint64_t incoming, const std::function<bool(uint32_t)>& usable,
                                     uint64_t max_refusals, uint64_t max_looks) override {
    // The insert that follows is the same miss: observed once.
    if (observed_ != incoming) Observe(incoming);
    observed_ = incoming;
    std::optional<uint32_t> victim = live_.PickVictim(incoming, usable, max_refusals, max_looks);
    if (!victim) observed_ = kNothingObserved;  // no insert follows: its next miss is another access
    return victim;
  }

  size_t MemoryBytes() const override {
    size_t bytes = live_.MemoryBytes();
    for (const auto& s : shadows_) bytes += s->MemoryBytes();
    return bytes;
  }

  std::string Describe() const override {
    return "adaptive: " + live_.shape().Describe() + " (" + std::to_string(switches_) +
           (switches_ == 1 ? " switch)" : " switches)");
  }

 private:
  // One access of `key`; the shadows see it when it is in the sample.
  void Observe(uint64_t key) {
    if (threshold_ != UINT64_MAX && Mix64(key ^ kSampleSeed) >= threshold_) return;
    for (const auto& s : shadows_) s->Access(key);
    if (++sampled_ % period_ == 0) Decide();
  }

  void Decide() {
    size_t best = current_;
    for (size_t i = 0; i < kShapeCount; ++i) {
      scores_[i] = scores_[i] * kScoreDecay + static_cast<double>(shadows_[i]->TakeHits());
      if (scores_[i] > scores_[best]) best = i;
    }
    // A lead of a few hits (scores near zero: a cold cache, a scan) is noise.
    const double lead = scores_[best] - scores_[current_];
    if (best != current_ && scores_[best] > scores_[current_] * (1 + kSwitchMargin) && lead >= period_ * kMinLead) {
      current_ = best;
      live_.SetShape(kShapes[best]);
      ++switches_;
    }
  }

  // Apart from the index's and the ghost's hashes of the same line.
  static constexpr uint64_t kSampleSeed = 0x5bd1e9955bd1e995ull;
  static constexpr uint64_t kNothingObserved = UINT64_MAX;
  KeyOfSlot key_of_;
  S3Fifo live_;
  uint64_t threshold_;  // keys whose hash is below it are sampled (all: UINT64_MAX)
  uint32_t period_;     // sampled accesses between decisions
  std::vector<std::unique_ptr<ShadowCache>> shadows_;  // their policies point back at them
  std::vector<double> scores_;
  size_t current_ = 0;
  uint64_t sampled_ = 0, switches_ = 0;
  uint64_t observed_ = kNothingObserved;  // the incoming key PickVictim observed
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewAdaptivePolicy(uint32_t capacity, KeyOfSlot key_of) {
  return std::make_unique<Adaptive>(capacity, std::move(key_of));
}

}  // namespace cachecore
