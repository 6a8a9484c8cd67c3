// The compact tables under the slot table (line_index.h, dirty_lines.h) and
// the policy's ghost filter, against plain standard containers driven by
// the same random operations.
#include <gtest/gtest.h>

#include <algorithm>

#include <deque>
#include <map>
#include <random>
#include <set>

#include "../cache-core/src/engine/block_epochs.h"
#include "../cache-core/src/engine/dirty_lines.h"
#include "../cache-core/src/engine/line_index.h"
#include "../cache-core/src/policy/ghost_filter.h"
#include "../cache-core/src/policy/slot_fifo.h"
#include "cachecore/policy/eviction_policy.h"

namespace cachecore {
namespace {

TEST(PackedLinesTest, HoldsFortyBitLinesAndNoLine) {
  PackedLines lines(3, PackedLines::kMaxOriginLines);
  EXPECT_EQ(lines.Get(0), kNoLine);
  lines.Set(1, PackedLines::kMaxOriginLines - 1);
  lines.Set(2, 0x12'3456'789a);
  EXPECT_EQ(lines.Get(1), PackedLines::kMaxOriginLines - 1);
  EXPECT_EQ(lines.Get(2), 0x12'3456'789aull);
  lines.Set(2, kNoLine);
  EXPECT_EQ(lines.Get(2), kNoLine);
  EXPECT_EQ(lines.MemoryBytes(), 3u * 5);
}

TEST(PackedLinesTest, TakesFourBytesALineWhenTheOriginsLinesFit) {
  PackedLines lines(3, UINT32_MAX - 1);  // the highest line: 2^32 - 2
  EXPECT_EQ(lines.MemoryBytes(), 3u * 4);
  EXPECT_TRUE(lines.HighBytes().empty());
  EXPECT_EQ(lines.Get(0), kNoLine);
  lines.Set(1, UINT32_MAX - 2);
  lines.Set(2, 0);
  EXPECT_EQ(lines.Get(1), uint64_t{UINT32_MAX} - 2);
  EXPECT_EQ(lines.Get(2), 0u);
  lines.Set(1, kNoLine);
  EXPECT_EQ(lines.Get(1), kNoLine);
  EXPECT_EQ(PackedLines(3, UINT32_MAX).MemoryBytes(), 3u * 5);  // line 2^32 - 1 is the empty mark's
}

// Inserts and erases as the slot table does (a slot's line set before it
// is indexed, cleared after), checked against a std::map after each step.
void ExerciseIndex(uint32_t capacity, uint64_t line_range, uint32_t steps) {
  PackedLines lines(capacity, line_range);
  LineIndex index(capacity, lines);
  std::map<uint64_t, uint32_t> model;
  std::vector<uint32_t> free_slots;
  for (uint32_t s = 0; s < capacity; ++s) free_slots.push_back(s);
  std::mt19937_64 rng(capacity);
  for (uint32_t step = 0; step < steps; ++step) {
    const uint64_t line = rng() % line_range;
    auto it = model.find(line);
    if (it == model.end() && !free_slots.empty()) {
      const uint32_t slot = free_slots.back();
      free_slots.pop_back();
      lines.Set(slot, line);
      ASSERT_TRUE(index.Insert(line, slot));
      ASSERT_FALSE(index.Insert(line, slot));
      model[line] = slot;
    } else if (it != model.end()) {
      index.Erase(line);
      lines.Set(it->second, kNoLine);
      free_slots.push_back(it->second);
      model.erase(it);
    }
    const uint64_t probe = rng() % line_range;
    auto m = model.find(probe);
    ASSERT_EQ(index.Find(probe), m == model.end() ? LineIndex::kNotFound : m->second) << step;
  }
  ASSERT_EQ(index.size(), model.size());
  for (const auto& [line, slot] : model) ASSERT_EQ(index.Find(line), slot);
}

TEST(LineIndexTest, AgreesWithAMapUnderChurn) {
  ExerciseIndex(1000, 1500, 200000);        // mostly full: long probes, many shifts
  ExerciseIndex(1u << 20, 1u << 21, 300000);  // fingerprints of a few bits
  ExerciseIndex(7, 50, 20000);              // tiny: probes wrap around the table
  ExerciseIndex(1000, uint64_t{1} << 39, 20000);  // lines in 5 bytes
}

TEST(LineIndexTest, CostsUnderFiveBytesASlot) {
  PackedLines lines(1'000'000, PackedLines::kMaxOriginLines);
  LineIndex index(1'000'000, lines);
  EXPECT_LE(index.MemoryBytes(), 4'800'100u);
}

// Pushes and pops in bursts (chunks filled, emptied, reused; the FIFO
// emptied now and then), checked against a std::deque, at every width.
TEST(SlotFifoTest, AgreesWithADequeAtEveryWidth) {
  for (uint32_t bits = 1; bits <= 32; ++bits) {
    const uint32_t capacity = bits == 32 ? UINT32_MAX : uint32_t{1} << bits;
    SlotFifo fifo(capacity);
    ASSERT_EQ(fifo.bits(), bits);
    std::deque<uint32_t> model;
    std::mt19937_64 rng(bits);
    for (int burst = 0; burst < 40; ++burst) {
      const size_t pushes = rng() % 9000, pops = rng() % 9000;
      for (size_t i = 0; i < pushes; ++i) {
        // The largest slot and its neighbours often: every bit set.
        const uint32_t v = rng() % 4 == 0 ? capacity - 1 - static_cast<uint32_t>(rng() % 2)
                                          : static_cast<uint32_t>(rng() % capacity);
        fifo.PushBack(v);
        model.push_back(v);
      }
      for (size_t i = 0; i < pops && !model.empty(); ++i) {
        ASSERT_EQ(fifo.Front(), model.front()) << bits << " bits";
        fifo.PopFront();
        model.pop_front();
      }
      ASSERT_EQ(fifo.size(), model.size());
    }
    for (; !model.empty(); model.pop_front(), fifo.PopFront()) ASSERT_EQ(fifo.Front(), model.front());
    EXPECT_TRUE(fifo.empty());
  }
}

TEST(SlotFifoTest, TakesTheBitsTheLargestSlotNeeds) {
  SlotFifo fifo(1'000'000);  // slots up to 999,999: 20 bits
  EXPECT_EQ(fifo.bits(), 20u);
  for (uint32_t s = 0; s < 1'000'000; ++s) fifo.PushBack(s);
  EXPECT_LE(fifo.MemoryBytes(), 1'000'000u * 20 / 8 + 20'000);
  EXPECT_EQ(SlotFifo(1).bits(), 1u);
}

TEST(FreeSlotsTest, HandsOutFreedSlotsFirstThenAscending) {
  FreeSlotBitmap free(200);
  EXPECT_EQ(free.size(), 200u);
  for (uint32_t s = 0; s < 130; ++s) ASSERT_EQ(free.Take(), s);
  free.Put(5);
  free.Put(129);  // in the cursor's word: found by the cursor
  free.Put(5);    // twice: counted once
  EXPECT_EQ(free.size(), 72u);
  EXPECT_EQ(free.Take(), 5u);  // freed behind the cursor: the stack
  EXPECT_EQ(free.Take(), 129u);
  for (uint32_t s = 130; s < 200; ++s) ASSERT_EQ(free.Take(), s);
  EXPECT_TRUE(free.empty());
  free.Put(7);
  free.Remove(7);  // a warm start's adoption
  EXPECT_TRUE(free.empty());
  EXPECT_FALSE(free.Contains(7));
  free.Put(8);
  EXPECT_EQ(free.Take(), 8u);  // 7's stale entry skipped
}

// A full cache whose few free slots are scattered (trims): the slot freed
// is the one taken (from the stack: no scan of 65,536 bitmap words each).
TEST(FreeSlotsTest, AFreedSlotInAFullCacheIsTheNextTaken) {
  constexpr uint32_t kSlots = 1u << 22;
  FreeSlotBitmap free(kSlots);
  for (uint32_t s = 0; s < kSlots; ++s) free.Take();
  for (uint64_t round = 0; round < 100000; ++round) {
    const uint32_t slot = static_cast<uint32_t>((round * 2654435761u) % kSlots);
    free.Put(slot);
    ASSERT_EQ(free.Take(), slot);
  }
  EXPECT_TRUE(free.empty());
}

TEST(DirtyLineSetTest, AgreesWithASetAcrossArraysAndBitmaps) {
  DirtyLineSet dirty;
  std::set<uint64_t> model;
  std::mt19937_64 rng(7);
  // Dense in the first chunks (bitmaps), sparse far away (arrays).
  auto line = [&] { return rng() % 3 == 0 ? (rng() % (1ull << 34)) : rng() % 200000; };
  for (int step = 0; step < 400000; ++step) {
    const uint64_t l = line();
    if (rng() % 3 == 0) ASSERT_EQ(dirty.Erase(l), model.erase(l) == 1);
    else ASSERT_EQ(dirty.Insert(l), model.insert(l).second);
    if (step % 50000 == 0) {  // bitmaps shrink back into arrays
      for (uint64_t x = 0; x < 150000; ++x) {
        ASSERT_EQ(dirty.Erase(x), model.erase(x) == 1);
      }
    }
  }
  ASSERT_EQ(dirty.size(), model.size());
  for (int i = 0; i < 1000; ++i) {
    const uint64_t l = line();
    ASSERT_EQ(dirty.Contains(l), model.count(l) == 1);
  }
  std::vector<uint64_t> all;
  dirty.AppendRange(0, kNoLine, SIZE_MAX, all);
  ASSERT_EQ(all, std::vector<uint64_t>(model.begin(), model.end()));
  // A window, cut short by `max`.
  std::vector<uint64_t> some;
  dirty.AppendRange(70000, 140000, 100, some);
  std::vector<uint64_t> expected;
  for (auto it = model.lower_bound(70000); it != model.end() && *it < 140000 && expected.size() < 100; ++it) {
    expected.push_back(*it);
  }
  EXPECT_EQ(some, expected);
}

// A warm start's load, from lines in slot order (any order): the same set
// as inserting them one by one, arrays and bitmaps alike, and it goes on
// taking inserts and erases.
// The dirty-region map's question: any dirty line in a region (a power of
// two of lines, inside a chunk or whole chunks), in arrays and bitmaps.
TEST(DirtyLineSetTest, AnyInAgreesWithASet) {
  DirtyLineSet dirty;
  std::set<uint64_t> model;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 30000; ++i) {  // chunk 0 a bitmap, chunk 3 an array, bits at word edges
    const uint64_t l = i % 2 ? rng() % 65536 : 3 * 65536 + rng() % 65536;
    dirty.Insert(l);
    model.insert(l);
  }
  for (uint64_t l : {uint64_t{15}, uint64_t{16}, uint64_t{31}}) dirty.Erase(l), model.erase(l);
  auto any = [&](uint64_t from, uint64_t end) {
    auto it = model.lower_bound(from);
    return it != model.end() && *it < end;
  };
  for (uint64_t size : {1ull, 2ull, 16ull, 64ull, 1024ull, 65536ull, 4 * 65536ull}) {
    for (int i = 0; i < 3000; ++i) {
      const uint64_t first = rng() % (6 * 65536) / size * size;
      ASSERT_EQ(dirty.AnyIn(first, first + size), any(first, first + size)) << first << " +" << size;
    }
  }
  EXPECT_FALSE(dirty.AnyIn(10 * 65536, 11 * 65536));
  for (uint64_t l : std::set<uint64_t>(model)) dirty.Erase(l);
  EXPECT_FALSE(dirty.AnyIn(0, 1ull << 40));
}

TEST(DirtyLineSetTest, ALoadFromUnsortedLinesEqualsInsertingThem) {
  std::mt19937_64 rng(11);
  std::set<uint64_t> model;
  while (model.size() < 60000) {  // dense chunks (bitmaps) and sparse ones (arrays)
    model.insert(rng() % 2 == 0 ? rng() % 100000 : rng() % (1ull << 36));
  }
  std::vector<uint64_t> shuffled(model.begin(), model.end());
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  DirtyLineSet loaded;
  int passes = 0;
  loaded.Load([&](const DirtyLineSet::LineVisitor& visit) {
    ++passes;
    for (uint64_t l : shuffled) visit(l);
  });
  EXPECT_EQ(passes, 2);
  ASSERT_EQ(loaded.size(), model.size());
  std::vector<uint64_t> all;
  loaded.AppendRange(0, kNoLine, SIZE_MAX, all);
  ASSERT_EQ(all, std::vector<uint64_t>(model.begin(), model.end()));
  DirtyLineSet inserted;
  for (uint64_t l : shuffled) inserted.Insert(l);
  EXPECT_LE(loaded.MemoryBytes(), inserted.MemoryBytes());  // no slack for growth
  for (int step = 0; step < 20000; ++step) {
    const uint64_t l = rng() % 100000;
    if (step % 2 == 0) ASSERT_EQ(loaded.Erase(l), model.erase(l) == 1);
    else ASSERT_EQ(loaded.Insert(l), model.insert(l).second);
  }
  all.clear();
  loaded.AppendRange(0, kNoLine, SIZE_MAX, all);
  EXPECT_EQ(all, std::vector<uint64_t>(model.begin(), model.end()));
}

TEST(DirtyLineSetTest, CostsAboutTwoBytesADirtyLine) {
  DirtyLineSet dirty;
  // Every 10th line of a 10-million-line origin: bitmaps.
  for (uint64_t l = 0; l < 10'000'000; l += 10) dirty.Insert(l);
  EXPECT_LE(dirty.MemoryBytes(), 1'000'000u * 2);
  // One line in every 300: arrays.
  DirtyLineSet sparse;
  for (uint64_t l = 0; l < 300'000'000; l += 300) sparse.Insert(l);
  EXPECT_LE(sparse.MemoryBytes(), 1'000'000u * 3);
}

// One byte an epoch answers what eight did, through hundreds of flushes,
// some of them failing (the completed epoch falls behind), as long as each
// flush's beginning sweeps its part: "written before the completed flush"
// and "written before epoch X" for the current epoch and the one before.
TEST(BlockEpochsTest, OneByteAnswersAsTheFullEpochThroughWrapsAndFailedFlushes) {
  constexpr size_t kBlocks = 1000;
  BlockEpochs epochs(kBlocks);
  std::vector<uint64_t> truth(kBlocks, 0);
  std::mt19937_64 rng(11);
  uint64_t started = 1, completed = 1;
  for (int flush = 0; flush < 5000; ++flush) {
    for (int w = 0; w < 50; ++w) {  // writes in the current epoch
      const size_t i = rng() % kBlocks;
      const uint64_t e = rng() % 8 == 0 ? 0 : started;  // some cleaned (epoch 0)
      epochs.Set(i, e);
      truth[i] = e;
    }
    for (size_t i = 0; i < kBlocks; ++i) {
      const uint64_t got = epochs.Get(i, started);
      ASSERT_EQ(got < completed, truth[i] < completed) << "stable, block " << i << " flush " << flush;
      ASSERT_EQ(got < started, truth[i] < started) << "maybe stable now, block " << i;
      ASSERT_EQ(got < started - 1, truth[i] < started - 1) << "maybe stable before, block " << i;
    }
    ++started;  // BeginFlush
    epochs.Sweep(started, completed);
    // Runs of flushes fail (nothing completes) for up to 300 epochs.
    if ((flush / 300) % 2 == 0 || rng() % 50 == 0) completed = started;
  }
}

// With 16-bit fingerprints (S3-FIFO's) and 12-bit ones (the adaptive
// policy's ghost of twice the keys): a key not remembered is found with a
// probability of about 16 in 2^bits.
TEST(GhostFilterTest, RemembersAboutTheLastKeysAndForgetsTaken) {
  for (const uint32_t bits : {16u, 12u}) {
    GhostFilter ghost(16000, bits);
    for (uint64_t k = 0; k < 40000; ++k) ghost.Add(k * 7919);
    // Nearly all of the last half of what it remembers (a bucket that drew
    // more than 16 of them forgets its oldest).
    uint64_t recent = 0;
    for (uint64_t k = 32000; k < 40000; ++k) recent += ghost.Take(k * 7919);
    EXPECT_GT(recent, 7900u) << bits;
    EXPECT_FALSE(ghost.Take(39999 * 7919)) << "taken once, forgotten";
    // Keys added long ago, and keys never added, are not found.
    uint64_t old = 0, never = 0;
    for (uint64_t k = 0; k < 10000; ++k) old += ghost.Take(k * 7919);
    for (uint64_t k = 0; k < 100000; ++k) never += ghost.Take((k << 40) + 1);
    const uint64_t expected_false = 100000 * 16 >> bits;  // 24 or 390
    EXPECT_LT(old, 100u) << bits;
    EXPECT_LT(never, 2 * expected_false) << bits;
    EXPECT_EQ(ghost.MemoryBytes(), 16000u * bits / 8) << bits;
  }
}

// A lookup of the newest half of each bucket finds the newer half of the
// keys remembered, not the older (the adaptive policy's ghost of 1x main
// inside one of 2x).
TEST(GhostFilterTest, ALookupOfTheNewestHalfReachesHalfAsFarBack) {
  auto found = [](uint64_t first, uint64_t last, uint32_t newest) {
    GhostFilter ghost(16000, 12);
    for (uint64_t k = 0; k < 16000; ++k) ghost.Add(k * 7919);
    uint64_t n = 0;
    for (uint64_t k = first; k < last; ++k) n += ghost.Take(k * 7919, newest);
    return n;
  };
  // The newest quarter: as well found by the half as by the whole.
  EXPECT_GT(found(12000, 16000, GhostFilter::kBucket / 2), 3900u);
  // The oldest quarter: the half finds a few (buckets that drew fewer
  // than 8 keys since), far fewer than the whole does.
  const uint64_t half = found(0, 4000, GhostFilter::kBucket / 2), whole = found(0, 4000, GhostFilter::kBucket);
  EXPECT_GT(whole, 2000u);
  EXPECT_LT(half, whole / 2);
}

// Lines removed from the middle of the queues (invalidated, pinned) and
// inserted again leave stale entries behind: they are never victims twice,
// and a live line is never lost.
TEST(S3FifoTest, RemovedAndReinsertedSlotsAreVictimsOnce) {
  constexpr uint32_t kSlots = 64;
  std::vector<uint64_t> key(kSlots);
  auto policy = NewS3FifoPolicy(kSlots, 1, [&](uint32_t s) { return key[s]; });
  std::set<uint32_t> tracked;
  std::mt19937_64 rng(3);
  uint64_t next_key = 0;
  for (uint32_t s = 0; s < kSlots; ++s) {
    key[s] = next_key++;
    policy->OnInsert(s, key[s]);
    tracked.insert(s);
  }
  auto always = [](uint32_t) { return true; };
  for (int step = 0; step < 100000; ++step) {
    const uint32_t s = static_cast<uint32_t>(rng() % kSlots);
    switch (rng() % 4) {
      case 0:
        policy->OnHit(s);
        break;
      case 1:  // removed from the middle, then back
        policy->OnRemove(s);
        tracked.erase(s);
        if (rng() % 2) {
          key[s] = next_key++;
          policy->OnInsert(s, key[s]);
          tracked.insert(s);
        }
        break;
      default: {
        std::optional<uint32_t> v = policy->PickVictim(next_key, always, UINT64_MAX, UINT64_MAX);
        ASSERT_EQ(v.has_value(), !tracked.empty());
        if (!v) break;
        ASSERT_EQ(tracked.count(*v), 1u) << "a victim the policy no longer tracks";
        policy->OnRemove(*v);
        tracked.erase(*v);
        key[*v] = next_key++;
        policy->OnInsert(*v, key[*v]);
        tracked.insert(*v);
      }
    }
  }
  // Every tracked slot comes out exactly once.
  std::set<uint32_t> seen;
  while (auto v = policy->PickVictim(next_key, always, UINT64_MAX, UINT64_MAX)) {
    ASSERT_TRUE(seen.insert(*v).second);
    policy->OnRemove(*v);
  }
  EXPECT_EQ(seen, tracked);
  EXPECT_LT(policy->MemoryBytes(), kSlots * 8 + 64 * 1024);
}

}  // namespace
}  // namespace cachecore
