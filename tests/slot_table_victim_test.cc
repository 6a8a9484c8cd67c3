// Where a slot for a line not cached comes from, in the slot table alone:
// the policy's victim, or past dirty candidates the first clean line the
// cleaner left anywhere in its order, never a line the policy keeps for
// its own reasons (a reactor's bound on looks among lines with hits).
#include <gtest/gtest.h>

#include <vector>

#include "../cache-core/src/engine/slot_table.h"

namespace cachecore {
namespace {

class TakeAnyVictim : public VictimHandler {
 public:
  bool Claim(uint64_t) override { return true; }
  void ApplyDelete(MetadataStore::Batch&) override {}
  void ReleaseClaim() override {}
};

class VictimTest : public ::testing::TestWithParam<PolicyKind> {
 protected:
  explicit VictimTest(uint32_t lines = 1024) : lines_(lines), table_(lines, 1, Identity(lines), Identity(lines).origin_size, GetParam(), 1, stats_) {}
  static CacheIdentity Identity(uint32_t lines) {
    CacheIdentity identity;
    identity.line_size = 4096;
    identity.line_count = lines;
    identity.origin_size = uint64_t{lines} * 16 * 4096;
    return identity;
  }
  // Line `line` into a slot: the slot, and the line it evicted (kNoLine).
  std::optional<uint32_t> Take(uint64_t line, uint64_t& evicted) {
    bool sync_due;
    std::optional<uint32_t> slot = table_.TakeSlotWithoutWaiting(line, victims_, evicted, sync_due);
    if (evicted != kNoLine) table_.ForgetEvictions(table_.EvictionsListed());
    return slot;
  }
  uint32_t Fill(uint64_t line, bool dirty) {
    uint64_t evicted;
    std::optional<uint32_t> slot = Take(line, evicted);
    EXPECT_TRUE(slot.has_value());
    if (dirty) {
      table_.MarkDirty(*slot, 0, 0, false, table_.FlushesStarted());
    } else {
      table_.MarkValidClean(*slot, 0, 0, table_.FlushesStarted());
    }
    return *slot;
  }

  const uint32_t lines_;
  LiveStats stats_;
  SlotTable table_;
  TakeAnyVictim victims_;
};

TEST_P(VictimTest, PastDirtyCandidatesTheCleanLinesAreFoundWhereverTheyLie) {
  // All dirty but the 20 lines filled last: at the far end of the
  // policy's order from its next victims.
  for (uint64_t line = 0; line < lines_ - 20; ++line) Fill(line, true);
  for (uint64_t line = lines_ - 20; line < lines_; ++line) Fill(line, false);
  for (uint64_t line = lines_; line < lines_ + 20; ++line) {  // writes, each made dirty
    uint64_t evicted = kNoLine;
    std::optional<uint32_t> slot = Take(line, evicted);
    ASSERT_TRUE(slot.has_value()) << "line " << line;
    EXPECT_GE(evicted, lines_ - 20) << "a dirty line was evicted";
    EXPECT_LT(evicted, lines_);
    table_.MarkDirty(*slot, 0, 0, false, table_.FlushesStarted());
  }
  // Every clean line is gone: the next goes around the cache.
  uint64_t evicted = kNoLine;
  EXPECT_FALSE(Take(2 * lines_, evicted).has_value());
  EXPECT_EQ(stats_.dirty_lines.load(), lines_);
}

INSTANTIATE_TEST_SUITE_P(Policies, VictimTest,
                         ::testing::Values(PolicyKind::kAdaptive, PolicyKind::kS3Fifo, PolicyKind::kLru,
                                           PolicyKind::kArc));  // W-TinyLFU's admission may keep a miss out

// A reactor looks at 4,096 candidates at most; lines given another round
// for their hits are no refusals, so a warm cache whose every line was hit
// sends the miss around it, and the next goes on where this one stopped.
// Clean lines at hand must not turn that into evicting them in slot order.
class HotVictimTest : public VictimTest {
 protected:
  HotVictimTest() : VictimTest(8192) {}
};

TEST_P(HotVictimTest, LinesKeptForTheirHitsAreNotEvictedPastThePolicy) {
  std::vector<uint32_t> slots;
  for (uint64_t line = 0; line < lines_; ++line) slots.push_back(Fill(line, false));
  for (int round = 0; round < 3; ++round) table_.NoteHits(slots);
  uint64_t evicted = kNoLine;
  EXPECT_FALSE(Take(lines_, evicted).has_value());
  EXPECT_EQ(evicted, kNoLine);
}

INSTANTIATE_TEST_SUITE_P(Policies, HotVictimTest, ::testing::Values(PolicyKind::kS3Fifo));

}  // namespace
}  // namespace cachecore
