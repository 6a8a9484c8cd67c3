// Intrusive doubly linked lists over slot numbers: a slot is in at most
// one list of a SlotLists at a time, and moving it costs no allocation.
// SlotSegments adds which list each slot is in.
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

// Slots in segments 1 to kMaxSegment (a policy's queues: ARC's T1 and T2,
// W-TinyLFU's window, probation and protected), each a list, and which
// segment each slot is in (kNone: none, not tracked).
class SlotSegments {
 public:
  static constexpr uint8_t kNone = 0, kMaxSegment = 3;

  explicit SlotSegments(uint32_t capacity) : lists_(capacity), segment_(capacity, kNone) {}

  uint8_t Of(uint32_t s) const { return segment_[s]; }
  const SlotLists::List& list(uint8_t segment) const { return segments_[segment]; }
  // The newest of `segment`. REQUIRES: `s` is in none.
  void Put(uint32_t s, uint8_t segment) {
    lists_.PushHead(segments_[segment], s);
    segment_[s] = segment;
  }
  // The newest of `to` (its own segment: made the newest). REQUIRES: `s` is in one.
  void Move(uint32_t s, uint8_t to) {
    lists_.MoveToHead(segments_[segment_[s]], segments_[to], s);
    segment_[s] = to;
  }
  // Out of its segment; nothing when it is in none.
  void Remove(uint32_t s) {
    if (segment_[s] == kNone) return;
    lists_.Unlink(segments_[segment_[s]], s);
    segment_[s] = kNone;
  }
  size_t MemoryBytes() const { return lists_.MemoryBytes() + segment_.capacity(); }

 private:
  SlotLists lists_;
  SlotLists::List segments_[kMaxSegment + 1];  // kNone's unused
  std::vector<uint8_t> segment_;
};

}  // namespace cachecore
