// Intrusive doubly linked lists over slot numbers: a slot is in at most
// one list of a SlotLists at a time, and moving it costs no allocation.
// Not thread-safe. Not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cachecore {

class SlotLists {
 public:
  static constexpr uint32_t kNil = UINT32_MAX;

  struct List {
    uint32_t head = kNil, tail = kNil, size = 0;
  };

  explicit SlotLists(uint32_t capacity) : prev_(capacity, kNil), next_(capacity, kNil) {}

  // Makes `s` the head (the most recent end) of `l`. REQUIRES: `s` is in no list.
  void PushHead(List& l, uint32_t s) {
    prev_[s] = kNil;
    next_[s] = l.head;
    if (l.head != kNil) prev_[l.head] = s;
    l.head = s;
    if (l.tail == kNil) l.tail = s;
    ++l.size;
  }

  // REQUIRES: `s` is in `l`.
  void Unlink(List& l, uint32_t s) {
    if (prev_[s] != kNil) next_[prev_[s]] = next_[s]; else l.head = next_[s];
    if (next_[s] != kNil) prev_[next_[s]] = prev_[s]; else l.tail = prev_[s];
    prev_[s] = next_[s] = kNil;
    --l.size;
  }

  // From `from` to the head of `to` (the same list: to its head).
  void MoveToHead(List& from, List& to, uint32_t s) {
    Unlink(from, s);
    PushHead(to, s);
  }

  size_t MemoryBytes() const { return (prev_.capacity() + next_.capacity()) * sizeof(uint32_t); }

 private:
  std::vector<uint32_t> prev_, next_;
};

}  // namespace cachecore
