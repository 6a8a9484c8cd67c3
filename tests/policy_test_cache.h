// A cache run by one eviction policy as the engine runs it, for the
// policies' tests (policy_candidates_test, adaptive_policy_test).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cachecore/policy/eviction_policy.h"

namespace cachecore {

// A cache of `capacity` lines run by one policy, as the engine runs it: a
// hit tells the policy, a miss takes a free slot or the policy's victim.
class Cache {
 public:
  Cache(PolicyKind kind, uint32_t capacity)
      : Cache(capacity, [&](KeyOfSlot key_of) { return NewEvictionPolicy(kind, capacity, 1, std::move(key_of)); }) {}
  // A policy `make` builds over the cache's keys.
  Cache(uint32_t capacity, const std::function<std::unique_ptr<EvictionPolicy>(KeyOfSlot)>& make)
      : key_(capacity), policy_(make([this](uint32_t s) { return key_[s]; })), capacity_(capacity) {}

  // Lines brought in by the last `n` misses are busy (a request of n lines
  // holds them), as the engine's stripes make them: not usable as victims.
  void HoldLastInserted(size_t n) { held_ = n; }

  // True on a hit.
  bool Access(uint64_t key) {
    auto it = slot_of_.find(key);
    if (it != slot_of_.end()) {
      policy_->OnHit(it->second);
      return true;
    }
    uint32_t slot = static_cast<uint32_t>(slot_of_.size());
    if (slot == capacity_) {
      auto usable = [&](uint32_t s) {
        return std::find(recent_.end() - std::min(held_, recent_.size()), recent_.end(), s) == recent_.end();
      };
      std::optional<uint32_t> v = policy_->PickVictim(key, usable, 64, UINT64_MAX);
      if (!v) return false;  // every line busy, or the policy would not let `key` in: not cached
      slot = *v;
      policy_->OnRemove(slot);
      slot_of_.erase(key_[slot]);
    }
    key_[slot] = key;
    slot_of_[key] = slot;
    policy_->OnInsert(slot, key);
    recent_.push_back(slot);
    if (recent_.size() > 64) recent_.erase(recent_.begin());
    return false;
  }

  const EvictionPolicy& policy() const { return *policy_; }

  uint64_t Hits(const std::vector<uint64_t>& keys) {
    uint64_t hits = 0;
    for (uint64_t k : keys) hits += Access(k);
    return hits;
  }

 private:
  std::vector<uint64_t> key_;
  std::unordered_map<uint64_t, uint32_t> slot_of_;
  std::unique_ptr<EvictionPolicy> policy_;
  uint32_t capacity_;
  std::vector<uint32_t> recent_;  // the slots of the latest misses, oldest first
  size_t held_ = 0;
};

inline std::vector<uint64_t> Range(uint64_t first, uint64_t end) {
  std::vector<uint64_t> keys;
  for (uint64_t k = first; k < end; ++k) keys.push_back(k);
  return keys;
}

}  // namespace cachecore
