#include "cachecore/policy/eviction_policy.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "policy/slot_lists.h"

namespace cachecore {

namespace {

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

std::unique_ptr<EvictionPolicy> NewLruPolicy(uint32_t capacity) {
  return std::make_unique<Lru>(capacity);
}

namespace {
constexpr std::pair<PolicyKind, const char*> kPolicyNames[] = {
    {PolicyKind::kAdaptive, "adaptive"}, {PolicyKind::kS3Fifo, "s3fifo"}, {PolicyKind::kLru, "lru"},
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
    case PolicyKind::kAdaptive: return NewAdaptivePolicy(capacity, std::move(key_of));
    case PolicyKind::kS3Fifo: break;
  }
  return NewS3FifoPolicy(capacity, promote_after, std::move(key_of));
}

}  // namespace cachecore
