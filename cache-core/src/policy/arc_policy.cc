// ARC (Megiddo and Modha, FAST 2003): T1 holds lines seen once lately, T2
// lines seen at least twice; B1 and B2 remember the keys evicted from each
// (ghosts, as many as the cache has lines in all). A miss on a key in B1
// says T1 was too small, one in B2 that T2 was: the target size of T1, p,
// moves by the ratio of the ghost lists, and the line enters T2. Evictions
// take T1's oldest line while T1 is over p, else T2's.
//
// The ghosts are an exact map from key to node (about 50 bytes a ghost):
// ARC is a candidate to compare with, not the default.
#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cachecore/policy/eviction_policy.h"
#include "policy/slot_lists.h"

namespace cachecore {

namespace {

// B1 and B2: lists of remembered keys in nodes from a fixed pool.
class GhostLists {
 public:
  enum Which : uint8_t { kB1 = 0, kB2 = 1 };

  explicit GhostLists(uint32_t nodes) : lists_(nodes), keys_(nodes), which_(nodes) {
    index_.reserve(nodes);
    free_.reserve(nodes);
    for (uint32_t n = nodes; n-- > 0;) free_.push_back(n);
  }

  uint32_t size(Which w) const { return ghosts_[w].size; }

  // Forgets `key`; says in which list it was, if it was.
  std::optional<Which> Take(uint64_t key) {
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    const uint32_t node = it->second;
    const Which w = which_[node];
    Drop(node);
    return w;
  }

  // Remembers `key` as the newest of `w`; with no node free, the oldest
  // ghost of the longer list is forgotten first.
  void Add(Which w, uint64_t key) {
    if (index_.count(key) > 0) return;  // a key is in one list at most
    if (free_.empty()) DropOldest(size(kB1) >= size(kB2) ? kB1 : kB2);
    const uint32_t node = free_.back();
    free_.pop_back();
    keys_[node] = key;
    which_[node] = w;
    lists_.PushHead(ghosts_[w], node);
    index_.emplace(key, node);
  }

  void DropOldest(Which w) {
    if (ghosts_[w].size > 0) Drop(ghosts_[w].tail);
  }

  size_t MemoryBytes() const {
    // An unordered_map node: the pair, a next pointer, the cached hash.
    return lists_.MemoryBytes() + keys_.capacity() * 9 + free_.capacity() * 4 +
           index_.bucket_count() * sizeof(void*) + index_.size() * 32;
  }

 private:
  void Drop(uint32_t node) {
    lists_.Unlink(ghosts_[which_[node]], node);
    index_.erase(keys_[node]);
    free_.push_back(node);
  }

  SlotLists lists_;  // over nodes, not slots
  SlotLists::List ghosts_[2];
  std::vector<uint64_t> keys_;
  std::vector<Which> which_;
  std::vector<uint32_t> free_;
  std::unordered_map<uint64_t, uint32_t> index_;
};

class Arc : public EvictionPolicy {
 public:
  Arc(uint32_t capacity, KeyOfSlot key_of)
      : segments_(capacity), ghosts_(capacity), key_of_(std::move(key_of)),
        capacity_(capacity) {}

  void OnInsert(uint32_t slot, uint64_t key) override {
    OnRemove(slot);
    std::optional<GhostLists::Which> ghost;
    if (pending_ && pending_->key == key) ghost = pending_->ghost;  // PickVictim saw it come
    else ghost = TakeGhost(key);
    pending_.reset();
    segments_.Put(slot, ghost ? kT2 : kT1);
    TrimGhosts();
  }

  void OnHit(uint32_t slot) override {
    if (WhereOf(slot) == kNone) return;  // a line the engine keeps out of the policy (pinned)
    segments_.Move(slot, kT2);
  }

  void OnRemove(uint32_t slot) override { segments_.Remove(slot); }

  // As the paper's order has it: the incoming key leaves its ghost list
  // and moves p first, then REPLACE chooses (the key's ghost list breaks
  // the tie of T1 at exactly p), then OnInsert places the key.
  std::optional<uint32_t> PickVictim(uint64_t incoming, const std::function<bool(uint32_t)>& usable,
                                     uint64_t max_refusals, uint64_t max_looks) override {
    if (!pending_ || pending_->key != incoming) pending_ = Pending{incoming, TakeGhost(incoming)};
    const bool in_b2 = pending_->ghost == GhostLists::kB2;
    const uint64_t tracked = list(kT1).size + list(kT2).size;
    uint64_t looks = std::min<uint64_t>(tracked + 1, max_looks), refusals = 0;
    while (looks-- > 0 && tracked > 0) {
      const double t1 = list(kT1).size;
      const bool t1_first = t1 > 0 && (t1 > p_ || (in_b2 && t1 == p_) || list(kT2).size == 0);
      // The list REPLACE names, then the other: a busy line (often one the
      // request brought in just now) is passed over for the other list's
      // oldest rather than waiting a round.
      for (const Where w : {t1_first ? kT1 : kT2, t1_first ? kT2 : kT1}) {
        if (list(w).size == 0) continue;
        const uint32_t s = list(w).tail;
        if (usable(s)) {
          ghosts_.Add(w == kT1 ? GhostLists::kB1 : GhostLists::kB2, key_of_(s));
          return s;
        }
        segments_.Move(s, w);  // busy: another round at its list's head
        if (++refusals >= max_refusals) return NoVictim();
      }
    }
    return NoVictim();
  }

  size_t MemoryBytes() const override { return segments_.MemoryBytes() + ghosts_.MemoryBytes(); }

 private:
  enum Where : uint8_t { kNone = 0, kT1 = 1, kT2 = 2 };

  const SlotLists::List& list(Where w) const { return segments_.list(w); }
  Where WhereOf(uint32_t slot) const { return static_cast<Where>(segments_.Of(slot)); }

  // No insert follows: the incoming key goes back to its ghost list (p
  // stays moved: its miss happened).
  std::optional<uint32_t> NoVictim() {
    if (pending_ && pending_->ghost) ghosts_.Add(*pending_->ghost, pending_->key);
    pending_.reset();
    return std::nullopt;
  }

  // Takes `key` out of its ghost list, if it is in one, and moves p: a
  // ghost of T1 says T1 was too small, one of T2 that T2 was.
  std::optional<GhostLists::Which> TakeGhost(uint64_t key) {
    const double b1 = ghosts_.size(GhostLists::kB1), b2 = ghosts_.size(GhostLists::kB2);
    const std::optional<GhostLists::Which> ghost = ghosts_.Take(key);
    if (ghost == GhostLists::kB1) p_ = std::min<double>(capacity_, p_ + std::max(1.0, b2 / b1));
    if (ghost == GhostLists::kB2) p_ = std::max(0.0, p_ - std::max(1.0, b1 / b2));
    return ghost;
  }

  // The paper's bounds: T1 and B1 together at most c, all four at most 2c.
  void TrimGhosts() {
    while (list(kT1).size + ghosts_.size(GhostLists::kB1) > capacity_ && ghosts_.size(GhostLists::kB1) > 0) {
      ghosts_.DropOldest(GhostLists::kB1);
    }
    while (list(kT1).size + list(kT2).size + ghosts_.size(GhostLists::kB1) + ghosts_.size(GhostLists::kB2) >
               2 * uint64_t{capacity_} &&
           ghosts_.size(GhostLists::kB2) > 0) {
      ghosts_.DropOldest(GhostLists::kB2);
    }
  }

  SlotSegments segments_;
  GhostLists ghosts_;
  KeyOfSlot key_of_;
  uint32_t capacity_;
  double p_ = 0;  // T1's target size, in lines
  // The key PickVictim last made room for, out of its ghost list already.
  struct Pending {
    uint64_t key;
    std::optional<GhostLists::Which> ghost;
  };
  std::optional<Pending> pending_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewArcPolicy(uint32_t capacity, KeyOfSlot key_of) {
  return std::make_unique<Arc>(capacity, std::move(key_of));
}

}  // namespace cachecore
