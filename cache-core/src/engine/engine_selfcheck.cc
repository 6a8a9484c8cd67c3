// Test-only consistency checks.
// - The metadata store's line records against the slot table in RAM. Right
//   after an Open both are the same state (the store's unsynced puts are in
//   its memtable, so nothing is in between); a difference means a record
//   was lost, applied out of order, or written for a slot the RAM no longer
//   gives that line: the states a crash turns into lost or resurrected data.
// - Clean blocks against the origin: a clean block is served from the cache
//   until evicted, then from the origin; the two must agree, or the block
//   changes what it reads without a write.
#include <cstring>
#include <utility>
#include <string>
#include <unordered_map>
#include <vector>

#include "cachecore/metadata/checksum.h"
#include "engine/engine_impl.h"

namespace cachecore {

namespace {

bool DirtyClass(BlockClass c) {
  return c == BlockClass::kDirty || c == BlockClass::kDirtyFresh || c == BlockClass::kDirtyOverwritten;
}

// Collects the first few problems; the rest are only counted.
class Problems {
 public:
  explicit Problems(std::string what) : what_(std::move(what)) {}
  void Add(const std::string& what) {
    if (count_++ < kShown) text_ += (text_.empty() ? "" : "; ") + what;
  }
  Status ToStatus() const {
    if (count_ == 0) return Status::Ok();
    std::string more = count_ > kShown ? " (and " + std::to_string(count_ - kShown) + " more)" : "";
    return Status::Corruption(std::to_string(count_) + " " + what_ + ": " + text_ + more);
  }

 private:
  static constexpr size_t kShown = 8;
  std::string what_;
  size_t count_ = 0;
  std::string text_;
};

std::string SlotName(uint64_t slot) { return "slot " + std::to_string(slot); }

// One record against the slot's RAM state (caller holds every stripe and mu).
void CompareRecord(const Engine::Impl& im, uint64_t slot, const LineRecord& r, Problems& p) {
  if (slot >= im.capacity || r.classes.size() != im.blocks_per_line) {
    p.Add(SlotName(slot) + ": the record does not fit the geometry");
    return;
  }
  const uint32_t s = static_cast<uint32_t>(slot);
  const uint64_t line = im.slots.LineOf(s);
  if (line != r.origin_line) {
    p.Add(SlotName(slot) + ": the store says origin line " + std::to_string(r.origin_line) +
          ", RAM says " + (line == kNoLine ? "free" : std::to_string(line)));
    return;
  }
  for (uint32_t b = 0; b < im.blocks_per_line; ++b) {
    const uint8_t f = im.slots.Flags(s, b);
    const BlockClass c = r.classes[b];
    const bool valid = (f & kValid) != 0, dirty = (f & kDirty) != 0;
    const std::string where = SlotName(slot) + " block " + std::to_string(b);
    if (valid != (c != BlockClass::kInvalid)) {
      p.Add(where + ": the store says " + (valid ? "invalid" : "valid") + ", RAM the opposite");
    } else if (valid && dirty != DirtyClass(c)) {
      p.Add(where + ": the store says " + (dirty ? "clean" : "dirty") + ", RAM the opposite");
    } else if (valid && im.slots.Crc(s, b) != r.crcs[b]) {
      p.Add(where + ": the checksums differ");
    }
  }
}

// Every stripe (in index order, as batches take them): no segment is
// between its RAM change and its record, and the background threads wait.
std::vector<std::unique_lock<StripeLock>> HoldEveryStripe(Engine::Impl& im) {
  std::vector<std::unique_lock<StripeLock>> held;
  held.reserve(kStripes);
  for (StripeLock& m : im.stripes) held.emplace_back(m);
  return held;
}

}  // namespace

Status Engine::CheckRecordsAgreeForTest() const {
  Impl& im = *impl_;
  // Every stripe held: no slot changes (the slot table's shared state
  // changes only under the stripe of a line it concerns).
  auto stripes = HoldEveryStripe(im);
  Problems problems("disagreements between the store and RAM");
  std::vector<bool> recorded(im.capacity, false);
  std::unordered_map<uint64_t, uint64_t> slot_of_line;
  Status s = im.dev.metadata->ForEachLine([&](uint64_t slot, const LineRecord& r) -> Status {
    if (slot < im.capacity) recorded[slot] = true;
    if (auto [it, fresh] = slot_of_line.emplace(r.origin_line, slot); !fresh) {
      problems.Add("origin line " + std::to_string(r.origin_line) + " is recorded in slots " +
                   std::to_string(it->second) + " and " + std::to_string(slot));
    }
    CompareRecord(im, slot, r, problems);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  im.slots.CheckInvariants(recorded, [&](const std::string& what) { problems.Add(what); });
  return problems.ToStatus();
}

Status Engine::CheckCleanDataForTest(const std::function<bool(uint64_t)>& may_differ) const {
  Impl& im = *impl_;
  auto stripes = HoldEveryStripe(im);
  Problems problems("clean blocks the origin does not hold");
  AlignedBuffer cached(kBlockSize), origin(kBlockSize);
  for (uint32_t s = 0; s < im.capacity; ++s) {
    const uint64_t line = im.slots.LineOf(s);
    if (line == kNoLine) continue;
    for (uint32_t b = 0; b < im.blocks_per_line; ++b) {
      if ((im.slots.Flags(s, b) & (kValid | kDirty)) != kValid) continue;
      const std::string where = SlotName(s) + " (line " + std::to_string(line) + ") block " + std::to_string(b);
      if (!im.dev.cache->Read(im.SlotOffset(s, b), cached.data(), kBlockSize).ok() ||
          !im.raw_origin->Read(im.OriginOffset(line, b), origin.data(), kBlockSize).ok()) {
        problems.Add(where + ": cannot be read");
        continue;
      }
      // A copy that fails its checksum is never served (the origin's is).
      if (im.CheckOf(cached.data(), s, b) != im.slots.Crc(s, b)) continue;
      const uint64_t first_sector = im.OriginOffset(line, b) / kSectorSize;
      for (uint32_t k = 0; k < kBlockSize / kSectorSize; ++k) {
        if (std::memcmp(cached.data() + k * kSectorSize, origin.data() + k * kSectorSize, kSectorSize) != 0 &&
            !may_differ(first_sector + k)) {
          problems.Add(where + ": clean and proven, but the origin holds other data in sector " +
                       std::to_string(first_sector + k));
          break;
        }
      }
    }
  }
  return problems.ToStatus();
}

}  // namespace cachecore
