#include "cachecore/policy/eviction_policy.h"

#include <algorithm>
#include <cassert>
#include <deque>
#include <unordered_map>
#include <vector>

namespace cachecore {

namespace {

constexpr uint32_t kNil = UINT32_MAX;

// Intrusive doubly linked FIFOs over slot numbers: no allocation per access.
class SlotLists {
 public:
  explicit SlotLists(uint32_t capacity) : prev_(capacity, kNil), next_(capacity, kNil) {}

  struct List {
    uint32_t head = kNil, tail = kNil, size = 0;
  };

  void PushHead(List& l, uint32_t s) {
    prev_[s] = kNil;
    next_[s] = l.head;
    if (l.head != kNil) prev_[l.head] = s;
    l.head = s;
    if (l.tail == kNil) l.tail = s;
    ++l.size;
  }

  void Unlink(List& l, uint32_t s) {
    if (prev_[s] != kNil) next_[prev_[s]] = next_[s]; else l.head = next_[s];
    if (next_[s] != kNil) prev_[next_[s]] = prev_[s]; else l.tail = prev_[s];
    prev_[s] = next_[s] = kNil;
    --l.size;
  }

 private:
  std::vector<uint32_t> prev_, next_;
};

class S3Fifo : public EvictionPolicy {
 public:
  S3Fifo(uint32_t capacity, uint32_t promote_after)
      : lists_(capacity), freq_(capacity, 0), where_(capacity, kNone), key_(capacity, 0),
        small_target_(std::max<uint32_t>(1, capacity / 10)),
        ghost_limit_(capacity - small_target_), promote_after_(promote_after) {}

  void OnInsert(uint32_t slot, uint64_t key) override {
    key_[slot] = key;
    freq_[slot] = 0;
    auto g = ghost_.find(key);
    if (g != ghost_.end()) {  // seen recently and evicted early: straight to main
      ghost_.erase(g);
      Place(slot, kMain);
    } else {
      Place(slot, kSmall);
    }
  }

  void OnHit(uint32_t slot) override {
    if (freq_[slot] < 3) ++freq_[slot];
  }

  void OnRemove(uint32_t slot) override {
    if (where_[slot] == kSmall) lists_.Unlink(small_, slot);
    else if (where_[slot] == kMain) lists_.Unlink(main_, slot);
    where_[slot] = kNone;
  }

  std::optional<uint32_t> PickVictim(const std::function<bool(uint32_t)>& usable,
                                     uint64_t max_refusals, uint64_t max_looks) override {
    // Each occupied slot is looked at a bounded number of times (a main
    // line is re-queued at most 3 times before its frequency is spent).
    uint64_t budget = std::min<uint64_t>(5ull * (small_.size + main_.size) + 8, max_looks), refusals = 0;
    while (budget-- > 0 && small_.size + main_.size > 0) {
      bool from_small = small_.size >= small_target_ || main_.size == 0;
      bool refused = false;
      std::optional<uint32_t> v = from_small ? FromSmall(usable, refused) : FromMain(usable, refused);
      if (v) return v;
      if (refused && ++refusals >= max_refusals) break;
    }
    return std::nullopt;
  }

 private:
  enum Where : uint8_t { kNone, kSmall, kMain };

  void Place(uint32_t slot, Where w) {
    where_[slot] = w;
    lists_.PushHead(w == kSmall ? small_ : main_, slot);
  }

  std::optional<uint32_t> FromSmall(const std::function<bool(uint32_t)>& usable, bool& refused) {
    uint32_t t = small_.tail;
    lists_.Unlink(small_, t);
    if (freq_[t] > promote_after_) {
      freq_[t] = 0;
      Place(t, kMain);
      return std::nullopt;
    }
    if (!usable(t)) {
      Place(t, kSmall);
      refused = true;
      return std::nullopt;
    }
    Place(t, kSmall);  // stays tracked until OnRemove; remembered as a ghost
    Remember(key_[t]);
    return t;
  }

  std::optional<uint32_t> FromMain(const std::function<bool(uint32_t)>& usable, bool& refused) {
    uint32_t t = main_.tail;
    lists_.Unlink(main_, t);
    if (freq_[t] > 0) {
      --freq_[t];
      Place(t, kMain);
      return std::nullopt;
    }
    Place(t, kMain);
    if (!usable(t)) {
      refused = true;
      return std::nullopt;
    }
    return t;
  }

  void Remember(uint64_t key) {
    ghost_[key] = ++ghost_clock_;
    ghost_fifo_.push_back({key, ghost_clock_});
    while (ghost_.size() > ghost_limit_ && !ghost_fifo_.empty()) {
      auto [k, stamp] = ghost_fifo_.front();
      ghost_fifo_.pop_front();
      auto it = ghost_.find(k);
      if (it != ghost_.end() && it->second == stamp) ghost_.erase(it);
    }
    // Entries superseded by a later Remember are skipped above; keep the
    // FIFO from growing without bound when keys repeat.
    if (ghost_fifo_.size() > 2 * static_cast<size_t>(ghost_limit_) + 16) Compact();
  }

  void Compact() {
    std::deque<std::pair<uint64_t, uint64_t>> kept;
    for (auto& e : ghost_fifo_) {
      auto it = ghost_.find(e.first);
      if (it != ghost_.end() && it->second == e.second) kept.push_back(e);
    }
    ghost_fifo_.swap(kept);
  }

  SlotLists lists_;
  SlotLists::List small_, main_;
  std::vector<uint8_t> freq_;
  std::vector<Where> where_;
  std::vector<uint64_t> key_;
  uint32_t small_target_;
  uint32_t ghost_limit_;
  uint32_t promote_after_;
  std::unordered_map<uint64_t, uint64_t> ghost_;
  std::deque<std::pair<uint64_t, uint64_t>> ghost_fifo_;
  uint64_t ghost_clock_ = 0;
};

class Lru : public EvictionPolicy {
 public:
  explicit Lru(uint32_t capacity) : lists_(capacity), tracked_(capacity, false) {}
  void OnInsert(uint32_t slot, uint64_t) override {
    lists_.PushHead(list_, slot);
    tracked_[slot] = true;
  }
  void OnHit(uint32_t slot) override {
    if (!tracked_[slot]) return;  // a line the engine keeps out of the policy (pinned)
    lists_.Unlink(list_, slot);
    lists_.PushHead(list_, slot);
  }
  void OnRemove(uint32_t slot) override {
    if (!tracked_[slot]) return;
    lists_.Unlink(list_, slot);
    tracked_[slot] = false;
  }
  std::optional<uint32_t> PickVictim(const std::function<bool(uint32_t)>& usable,
                                     uint64_t max_refusals, uint64_t max_looks) override {
    for (uint32_t n = 0; n < list_.size && n < std::min(max_refusals, max_looks); ++n) {
      uint32_t s = list_.tail;
      if (usable(s)) return s;
      lists_.Unlink(list_, s);  // busy: give it another round
      lists_.PushHead(list_, s);
    }
    return std::nullopt;
  }

 private:
  SlotLists lists_;
  SlotLists::List list_;
  std::vector<bool> tracked_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewS3FifoPolicy(uint32_t capacity, uint32_t promote_after) {
  return std::make_unique<S3Fifo>(capacity, promote_after);
}

std::unique_ptr<EvictionPolicy> NewLruPolicy(uint32_t capacity) {
  return std::make_unique<Lru>(capacity);
}

}  // namespace cachecore
