#include "cachecore/policy/eviction_policy.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "policy/ghost_filter.h"
#include "policy/slot_lists.h"
#include "policy/slot_fifo.h"

namespace cachecore {

namespace {

// S3-FIFO's queues are rings of slot numbers (SlotFifo: 20 to 32 bits a
// line where a linked list costs 64). A line removed from the middle (invalidated,
// pinned, demoted) leaves its entry behind, skipped when it reaches the
// tail; so does a line moved and re-queued. Each slot counts its entries
// in each ring (2 bits each, stopping at 3): an entry is the slot's live
// one when it is the last of them and the slot is placed in that ring. A
// slot with more than 3 entries (removed and inserted again and again)
// is found at one of its older ones, a little early, never lost. A ring is
// compacted when stale entries outnumber live ones (amortized: constant
// time a call).
class S3Fifo : public EvictionPolicy {
 public:
  S3Fifo(uint32_t capacity, uint32_t promote_after, KeyOfSlot key_of)
      : meta_(capacity, 0), key_of_(std::move(key_of)),
        rings_{Ring(capacity), Ring(capacity), Ring(capacity)},
        small_target_(std::max<uint32_t>(1, capacity / 10)),
        ghost_(std::max<uint32_t>(1, capacity - small_target_)),
        promote_after_(promote_after),
        capacity_(capacity) {}

  void OnInsert(uint32_t slot, uint64_t key) override {
    OnRemove(slot);
    SetFreq(slot, 0);
    // Seen recently and evicted early: straight to main. (Nothing to find
    // before the first eviction: a warm start's million inserts skip it.)
    Place(slot, ghost_used_ && ghost_.Take(key) ? kMain : kSmall);
  }

  void OnHit(uint32_t slot) override {
    if (Freq(slot) < 3) SetFreq(slot, Freq(slot) + 1);
  }

  void OnRemove(uint32_t slot) override {
    const Where w = WhereOf(slot);
    if (w == kSmall || w == kMain) --rings_[w].live;
    SetWhere(slot, kNone);
  }

  std::optional<uint32_t> PickVictim(uint64_t /*incoming*/, const std::function<bool(uint32_t)>& usable,
                                     uint64_t max_refusals, uint64_t max_looks) override {
    // Each occupied slot is looked at a bounded number of times (a main
    // line is re-queued at most 3 times before its frequency is spent).
    const uint64_t live = rings_[kSmall].live + rings_[kMain].live;
    uint64_t budget = std::min<uint64_t>(5 * live + 8, max_looks), refusals = 0;
    while (budget-- > 0 && rings_[kSmall].live + rings_[kMain].live > 0) {
      const bool from_small = rings_[kSmall].live >= small_target_ || rings_[kMain].live == 0;
      bool refused = false;
      std::optional<uint32_t> v = from_small ? FromSmall(usable, refused) : FromMain(usable, refused);
      if (v) return v;
      if (refused && ++refusals >= max_refusals) break;
    }
    return std::nullopt;
  }

  size_t MemoryBytes() const override {
    return meta_.capacity() + ghost_.MemoryBytes() + rings_[kSmall].entries.MemoryBytes() +
           rings_[kMain].entries.MemoryBytes();
  }

 private:
  // Per slot, one byte: where (2 bits), frequency (2), entries in the
  // small ring (2) and in the main ring (2).
  enum Where : uint8_t { kNone = 0, kSmall = 1, kMain = 2, kPicked = 3 };
  struct Ring {
    explicit Ring(uint32_t capacity) : entries(capacity) {}
    SlotFifo entries;  // pushed at the back, taken from the front
    uint64_t live = 0;
  };

  Where WhereOf(uint32_t s) const { return static_cast<Where>(meta_[s] & 3); }
  void SetWhere(uint32_t s, Where w) { meta_[s] = static_cast<uint8_t>((meta_[s] & ~3) | w); }
  uint32_t Freq(uint32_t s) const { return (meta_[s] >> 2) & 3; }
  void SetFreq(uint32_t s, uint32_t f) { meta_[s] = static_cast<uint8_t>((meta_[s] & ~0xc) | f << 2); }
  // Entries of slot `s` in ring `w` (kSmall or kMain).
  uint32_t Entries(uint32_t s, Where w) const { return (meta_[s] >> (2 + 2 * w)) & 3; }
  void SetEntries(uint32_t s, Where w, uint32_t n) {
    const int shift = 2 + 2 * w;
    meta_[s] = static_cast<uint8_t>((meta_[s] & ~(3 << shift)) | n << shift);
  }

  void Place(uint32_t slot, Where w) {
    Ring& r = rings_[w];
    if (r.entries.size() > 2 * r.live + 1024) Compact(w);
    SetWhere(slot, w);
    SetEntries(slot, w, std::min<uint32_t>(Entries(slot, w) + 1, 3));
    r.entries.PushBack(slot);
    ++r.live;
  }

  // The live entry nearest the front of ring `w`, taken out (its slot then
  // placed nowhere), skipping stale ones. REQUIRES: the ring has a live one.
  uint32_t TakeFront(Where w) {
    Ring& r = rings_[w];
    for (;;) {
      const uint32_t s = r.entries.Front();
      r.entries.PopFront();
      if (Entries(s, w) == 0) continue;  // past the live one of a slot that had more than 3
      const uint32_t n = Entries(s, w) - 1;
      SetEntries(s, w, n);
      if (n == 0 && WhereOf(s) == w) {
        --r.live;
        SetWhere(s, kNone);
        return s;
      }
    }
  }

  // Keeps only the live entries of ring `w`, in their order.
  void Compact(Where w) {
    Ring& r = rings_[w];
    SlotFifo kept(capacity_);
    for (; !r.entries.empty(); r.entries.PopFront()) {
      const uint32_t s = r.entries.Front();
      if (Entries(s, w) == 0) continue;
      const uint32_t n = Entries(s, w) - 1;
      SetEntries(s, w, n);
      if (n == 0 && WhereOf(s) == w) kept.PushBack(s);
    }
    // Counted once all are seen: a slot with more than 3 entries is kept at
    // an older one, and its later ones are skipped only while it counts 0.
    for (; !kept.empty(); kept.PopFront()) {
      SetEntries(kept.Front(), w, 1);
      r.entries.PushBack(kept.Front());
    }
  }

  std::optional<uint32_t> FromSmall(const std::function<bool(uint32_t)>& usable, bool& refused) {
    const uint32_t t = TakeFront(kSmall);
    if (Freq(t) > promote_after_) {
      SetFreq(t, 0);
      Place(t, kMain);
      return std::nullopt;
    }
    if (!usable(t)) {
      Place(t, kSmall);
      refused = true;
      return std::nullopt;
    }
    SetWhere(t, kPicked);
    ghost_.Add(key_of_(t));
    ghost_used_ = true;
    return t;
  }

  std::optional<uint32_t> FromMain(const std::function<bool(uint32_t)>& usable, bool& refused) {
    const uint32_t t = TakeFront(kMain);
    if (Freq(t) > 0) {
      SetFreq(t, Freq(t) - 1);
      Place(t, kMain);
      return std::nullopt;
    }
    if (!usable(t)) {
      Place(t, kMain);
      refused = true;
      return std::nullopt;
    }
    SetWhere(t, kPicked);
    return t;
  }

  std::vector<uint8_t> meta_;
  KeyOfSlot key_of_;
  Ring rings_[3];  // by Where: kSmall and kMain
  uint32_t small_target_;
  GhostFilter ghost_;
  bool ghost_used_ = false;
  uint32_t promote_after_;
  uint32_t capacity_;
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
  size_t MemoryBytes() const override { return lists_.MemoryBytes() + tracked_.capacity() / 8; }
  std::optional<uint32_t> PickVictim(uint64_t /*incoming*/, const std::function<bool(uint32_t)>& usable,
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

std::unique_ptr<EvictionPolicy> NewS3FifoPolicy(uint32_t capacity, uint32_t promote_after,
                                                KeyOfSlot key_of) {
  return std::make_unique<S3Fifo>(capacity, promote_after, std::move(key_of));
}

std::unique_ptr<EvictionPolicy> NewLruPolicy(uint32_t capacity) {
  return std::make_unique<Lru>(capacity);
}

namespace {
constexpr std::pair<PolicyKind, const char*> kPolicyNames[] = {
    {PolicyKind::kS3Fifo, "s3fifo"}, {PolicyKind::kLru, "lru"},
    {PolicyKind::kArc, "arc"}, {PolicyKind::kWTinyLfu, "wtinylfu"}};
}  // namespace

Result<PolicyKind> ParsePolicyName(const std::string& name) {
  for (const auto& [kind, known] : kPolicyNames) {
    if (name == known) return kind;
  }
  std::string known;
  for (size_t i = 0; i < std::size(kPolicyNames); ++i) {
    known += (i == 0 ? "" : i + 1 == std::size(kPolicyNames) ? " or " : ", ") + std::string(kPolicyNames[i].second);
  }
  return Status::InvalidArgument("unknown policy '" + name + "' (" + known + ")");
}

const char* PolicyName(PolicyKind kind) {
  for (const auto& [known_kind, name] : kPolicyNames) {
    if (kind == known_kind) return name;
  }
  return "unknown";
}

std::unique_ptr<EvictionPolicy> NewEvictionPolicy(PolicyKind kind, uint32_t capacity,
                                                  uint32_t promote_after, KeyOfSlot key_of) {
  switch (kind) {
    case PolicyKind::kLru: return NewLruPolicy(capacity);
    case PolicyKind::kArc: return NewArcPolicy(capacity, std::move(key_of));
    case PolicyKind::kWTinyLfu: return NewWTinyLfuPolicy(capacity, std::move(key_of));
    case PolicyKind::kS3Fifo: break;
  }
  return NewS3FifoPolicy(capacity, promote_after, std::move(key_of));
}

}  // namespace cachecore
