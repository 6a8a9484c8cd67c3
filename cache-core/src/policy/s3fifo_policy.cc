// S3-FIFO's queues are rings of slot numbers (SlotFifo: 20 to 32 bits a
// line where a linked list costs 64). A line removed from the middle (invalidated,
// pinned, demoted) leaves its entry behind, skipped when it reaches the
// front; so does a line moved and re-queued. Each slot counts its entries
// in each ring (2 bits each, stopping at 3): an entry is the slot's live
// one when it is the last of them and the slot is placed in that ring. A
// slot with more than 3 entries (removed and inserted again and again)
// is found at one of its older ones, a little early, never lost. A ring is
// compacted when stale entries outnumber live ones (amortized: constant
// time a call).
#include <algorithm>
#include <utility>

#include "policy/s3fifo.h"

namespace cachecore {

std::string S3FifoShape::Describe() const {
  std::string reach = std::to_string(ghost_percent / 100);
  if (ghost_percent % 100 != 0) reach += "." + std::to_string(ghost_percent % 100 / 10);
  return "small " + std::to_string(small_percent) + " %, T" + std::to_string(promote_after + 1) + ", ghost " +
         reach + "x";
}

namespace {
uint32_t SmallTarget(uint32_t capacity, uint32_t percent) {
  return std::max<uint32_t>(1, static_cast<uint32_t>(uint64_t{capacity} * percent / 100));
}
}  // namespace

S3Fifo::S3Fifo(uint32_t capacity, const S3FifoShape& shape, KeyOfSlot key_of, const GhostLayout& layout)
    : meta_(capacity, 0), key_of_(std::move(key_of)),
      rings_{Ring(capacity), Ring(capacity), Ring(capacity)},
      layout_(layout),
      // At the default share the ghost remembers as many keys as main holds.
      ghost_(std::max<uint64_t>(1, uint64_t{layout.max_percent} * (capacity - SmallTarget(capacity, 10)) / 100),
             layout.fingerprint_bits),
      capacity_(capacity) {
  SetShape(shape);
}

void S3Fifo::SetShape(const S3FifoShape& shape) {
  shape_ = shape;
  small_target_ = SmallTarget(capacity_, shape.small_percent);
  // Rounded to the nearest entry of a bucket.
  ghost_view_ = (2 * GhostFilter::kBucket * std::min(shape.ghost_percent, layout_.max_percent) + layout_.max_percent) /
                (2 * layout_.max_percent);
}

void S3Fifo::OnInsert(uint32_t slot, uint64_t key) {
  OnRemove(slot);
  SetFreq(slot, 0);
  // Seen recently and evicted early: straight to main. (Nothing to find
  // before the first eviction: a warm start's million inserts skip it.)
  Place(slot, ghost_used_ && ghost_.Take(key, ghost_view_) ? kMain : kSmall);
}

void S3Fifo::OnHit(uint32_t slot) {
  if (Freq(slot) < 3) SetFreq(slot, Freq(slot) + 1);
}

void S3Fifo::OnRemove(uint32_t slot) {
  const Where w = WhereOf(slot);
  if (w == kSmall || w == kMain) --rings_[w].live;
  SetWhere(slot, kNone);
}

std::optional<uint32_t> S3Fifo::PickVictim(uint64_t /*incoming*/, const std::function<bool(uint32_t)>& usable,
                                           uint64_t max_refusals, uint64_t max_looks) {
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

size_t S3Fifo::MemoryBytes() const {
  return meta_.capacity() + ghost_.MemoryBytes() + rings_[kSmall].entries.MemoryBytes() +
         rings_[kMain].entries.MemoryBytes();
}

void S3Fifo::SetEntries(uint32_t s, Where w, uint32_t n) {
  const int shift = 2 + 2 * w;
  meta_[s] = static_cast<uint8_t>((meta_[s] & ~(3 << shift)) | n << shift);
}

void S3Fifo::Place(uint32_t slot, Where w) {
  Ring& r = rings_[w];
  if (r.entries.size() > 2 * r.live + 1024) Compact(w);
  SetWhere(slot, w);
  SetEntries(slot, w, std::min<uint32_t>(Entries(slot, w) + 1, 3));
  r.entries.PushBack(slot);
  ++r.live;
}

// The live entry nearest the front of ring `w`, taken out (its slot then
// placed nowhere), the stale ones before it dropped. REQUIRES: the ring
// has a live one.
uint32_t S3Fifo::TakeFront(Where w) {
  Ring& r = rings_[w];
  for (;;) {
    const uint32_t s = r.entries.Front();
    const uint32_t n = Entries(s, w);
    r.entries.PopFront();
    if (n == 1 && WhereOf(s) == w) {
      SetEntries(s, w, 0);
      --r.live;
      SetWhere(s, kNone);
      return s;
    }
    if (n > 0) SetEntries(s, w, n - 1);  // an older entry of a slot that had more than one
  }
}

// Keeps only the live entries of ring `w`, in their order.
void S3Fifo::Compact(Where w) {
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

std::optional<uint32_t> S3Fifo::FromSmall(const std::function<bool(uint32_t)>& usable, bool& refused) {
  const uint32_t t = TakeFront(kSmall);
  if (Freq(t) > shape_.promote_after) {
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

std::optional<uint32_t> S3Fifo::FromMain(const std::function<bool(uint32_t)>& usable, bool& refused) {
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

std::unique_ptr<EvictionPolicy> NewS3FifoPolicy(uint32_t capacity, uint32_t promote_after,
                                                KeyOfSlot key_of) {
  return std::make_unique<S3Fifo>(capacity, S3FifoShape{10, promote_after, 100}, std::move(key_of), GhostLayout{});
}

}  // namespace cachecore
