// W-TinyLFU (Einziger, Friedman and Manes, ACM ToS 2017; Caffeine's
// design) in its static layout: a window LRU of 1 % of the lines that
// every new line enters, a segmented LRU main area (probation, and
// protected at 80 % of main), and TinyLFU admission: when the cache is
// full, the window's oldest line (the candidate) enters main only if the
// frequency sketch has seen it more often than main's oldest (the victim),
// and the loser goes.
#include <algorithm>
#include <utility>
#include <vector>

#include "cachecore/policy/eviction_policy.h"
#include "policy/frequency_sketch.h"
#include "policy/slot_lists.h"

namespace cachecore {

namespace {

class WTinyLfu : public EvictionPolicy {
 public:
  WTinyLfu(uint32_t capacity, KeyOfSlot key_of)
      : segments_(capacity), sketch_(capacity), key_of_(std::move(key_of)),
        window_target_(std::max<uint32_t>(1, capacity / 100)),
        protected_target_(std::max<uint32_t>(1, (capacity - window_target_) * 4 / 5)) {}

  void OnInsert(uint32_t slot, uint64_t key) override {
    OnRemove(slot);
    if (counted_ != key) sketch_.Increment(key);  // PickVictim counted it already
    counted_ = kNothingCounted;
    segments_.Put(slot, kWindow);
    // With free slots (the cache filling, or lines invalidated) the
    // window's overflow enters main without a duel: nothing need go.
    if (list(kWindow).size > window_target_) segments_.Move(list(kWindow).tail, kProbation);
  }

  void OnHit(uint32_t slot) override {
    const Where w = WhereOf(slot);
    if (w == kNone) return;  // a line the engine keeps out of the policy (pinned)
    sketch_.Increment(key_of_(slot));
    if (w == kProbation) {
      segments_.Move(slot, kProtected);
      if (list(kProtected).size > protected_target_) segments_.Move(list(kProtected).tail, kProbation);
    } else {
      segments_.Move(slot, w);
    }
  }

  void OnRemove(uint32_t slot) override { segments_.Remove(slot); }

  // `usable` claims the line it accepts, so only the line that goes is
  // asked. A busy line (a request holds it, often one this request just
  // brought in) is passed over, not promoted for it: the window's goes
  // to the window's head, probation's to its head (to protected when it
  // is probation's only line), protected's to its head. Once the whole
  // window has been passed over, the incoming line itself duels main's
  // victim: when it loses, nothing goes and it is not cached.
  std::optional<uint32_t> PickVictim(uint64_t incoming, const std::function<bool(uint32_t)>& usable,
                                     uint64_t max_refusals, uint64_t max_looks) override {
    CountAccess(incoming);  // an access whether or not the line is let in
    std::optional<uint32_t> victim = Choose(incoming, usable, max_refusals, max_looks);
    // No insert follows: the line's next miss is another access to count.
    if (!victim) counted_ = kNothingCounted;
    return victim;
  }

  size_t MemoryBytes() const override {
    return segments_.MemoryBytes() + sketch_.MemoryBytes();
  }

 private:
  enum Where : uint8_t { kNone = 0, kWindow = 1, kProbation = 2, kProtected = 3 };

  std::optional<uint32_t> Choose(uint64_t incoming, const std::function<bool(uint32_t)>& usable,
                                 uint64_t max_refusals, uint64_t max_looks) {
    const uint64_t tracked = list(kWindow).size + list(kProbation).size + list(kProtected).size;
    uint64_t looks = std::min<uint64_t>(3 * tracked + 3, max_looks), refusals = 0, window_passed = 0;
    while (looks-- > 0 && tracked > 0) {
      Contest c;
      if (window_passed < list(kWindow).size) {
        c = Duel();
      } else if (MainEmpty()) {
        return std::nullopt;  // the window is every line, and busy
      } else if (list(kWindow).size > 0 &&
                 sketch_.Estimate(incoming) <= sketch_.Estimate(key_of_(MainVictim()))) {
        return std::nullopt;
      } else {
        c = {MainVictim(), false};
      }
      if (usable(c.loser)) {
        if (c.candidate_won) segments_.Move(list(kWindow).tail, kProbation);
        return c.loser;
      }
      const Where w = WhereOf(c.loser);
      if (w == kWindow) ++window_passed;
      segments_.Move(c.loser, w == kProbation && list(kProbation).size == 1 ? kProtected : w);
      if (++refusals >= max_refusals) break;
    }
    return std::nullopt;
  }

  const SlotLists::List& list(Where w) const { return segments_.list(w); }
  Where WhereOf(uint32_t slot) const { return static_cast<Where>(segments_.Of(slot)); }

  // Main's oldest line: probation's, or protected's when probation is empty.
  uint32_t MainVictim() {
    return list(kProbation).size > 0 ? list(kProbation).tail : list(kProtected).tail;
  }
  bool MainEmpty() { return list(kProbation).size + list(kProtected).size == 0; }

  void CountAccess(uint64_t key) {
    if (counted_ == key) return;  // asked again for the same line
    sketch_.Increment(key);
    counted_ = key;
  }

  struct Contest {
    uint32_t loser;      // the line that should go
    bool candidate_won;  // the window's candidate then enters probation
  };

  // The window's candidate against main's victim, by frequency (ties go
  // against the candidate, as in TinyLFU); main's victim when the window
  // is below its share, the candidate when main is empty.
  Contest Duel() {
    if (list(kWindow).size == 0) return {MainVictim(), false};
    const uint32_t candidate = list(kWindow).tail;
    if (MainEmpty()) return {candidate, false};
    const uint32_t victim = MainVictim();
    if (list(kWindow).size < window_target_) return {victim, false};
    if (sketch_.Estimate(key_of_(candidate)) > sketch_.Estimate(key_of_(victim))) return {victim, true};
    return {candidate, false};
  }

  SlotSegments segments_;
  FrequencySketch sketch_;
  KeyOfSlot key_of_;
  uint32_t window_target_, protected_target_;
  static constexpr uint64_t kNothingCounted = UINT64_MAX;
  uint64_t counted_ = kNothingCounted;  // the incoming key PickVictim counted
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewWTinyLfuPolicy(uint32_t capacity, KeyOfSlot key_of) {
  return std::make_unique<WTinyLfu>(capacity, std::move(key_of));
}

}  // namespace cachecore
