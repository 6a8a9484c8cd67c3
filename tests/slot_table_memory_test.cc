// RAM per line of the slot table: what bounds the size of SSD a cache can
// use (issue 16: at most 24 bytes a 4 KiB line, every line dirty and the
// ghost full). Counts the table's own heap bytes part by part; the
// metadata bench measures the whole process (scripts/bench/meta_bench.cc).
#include <gtest/gtest.h>

#include "../cache-core/src/engine/slot_table.h"

namespace cachecore {
namespace {

class TakeAnyVictim : public VictimHandler {
 public:
  bool Claim(uint64_t) override { return true; }
  void ApplyDelete(MetadataStore::Batch&) override {}
  void ReleaseClaim() override {}
};

struct Filled {
  SlotTable::Memory memory;
  uint64_t lines;
};

// A cache of `lines` lines filled dirty, cleaned, churned through
// `churn` x lines new lines (the ghost fills), then every line dirty again.
Filled FillAndChurn(uint32_t lines, uint32_t blocks_per_line, uint32_t churn, PolicyKind policy = PolicyKind::kAdaptive) {
  CacheIdentity identity;
  identity.line_size = blocks_per_line * 4096;
  identity.line_count = lines;
  identity.origin_size = uint64_t{lines} * (churn + 1) * identity.line_size;
  LiveStats stats;
  SlotTable table(lines, blocks_per_line, identity, identity.origin_size, policy, 1, stats);
  TakeAnyVictim victims;
  const uint64_t epoch = table.FlushesStarted();
  auto all_dirty = [&] {
    for (uint32_t slot = 0; slot < lines; ++slot) {
      for (uint32_t b = 0; b < blocks_per_line; ++b) table.MarkDirty(slot, b, slot, false, epoch);
    }
  };
  for (uint64_t line = 0; line < uint64_t{lines} * (churn + 1); ++line) {
    if (line == lines) {  // full: clean, so the lines can be evicted
      all_dirty();
      for (uint32_t slot = 0; slot < lines; ++slot) {
        for (uint32_t b = 0; b < blocks_per_line; ++b) table.MarkClean(slot, b);
      }
    }
    uint64_t evicted;
    bool sync_due;
    std::optional<uint32_t> slot = table.TakeSlotWithoutWaiting(line, victims, evicted, sync_due);
    EXPECT_TRUE(slot.has_value());
    if (!slot) break;
    if (evicted != kNoLine) table.ForgetEvictions(table.EvictionsListed());  // a sync ran
    for (uint32_t b = 0; b < blocks_per_line; ++b) table.MarkValidClean(*slot, b, 0, epoch);
  }
  all_dirty();
  EXPECT_EQ(stats.dirty_lines.load(), lines);
  return {table.MemoryBytes(), lines};
}

void Report(const char* what, const Filled& f) {
  const double n = static_cast<double>(f.lines);
  std::printf("%s: %.1f B a line (per slot %.1f, index %.1f, policy %.1f, dirty lines %.1f, other %.1f)\n",
              what, f.memory.total() / n, f.memory.per_slot / n, f.memory.index / n,
              f.memory.policy / n, f.memory.dirty_lines / n, f.memory.other / n);
}

// 24 bytes a line is the process's budget (docs/design.md, "RAM per
// line"). With the adaptive policy (the default) the table holds 21.6 a
// line and its shadow caches' 0.5 MB, which is 0.5 a line at a million
// lines (0.05 at ten million); S3-FIFO by itself 20.7.
TEST(SlotTableMemoryTest, FourKiBLinesCostAtMost22AndAHalfBytesDirtyWithTheGhostFull) {
  const Filled f = FillAndChurn(1'000'000, 1, 3);
  Report("4 KiB lines", f);
  EXPECT_LE(f.memory.total(), 22.5 * f.lines);
  const Filled s3fifo = FillAndChurn(1'000'000, 1, 3, PolicyKind::kS3Fifo);
  Report("4 KiB lines, s3fifo", s3fifo);
  EXPECT_LE(s3fifo.memory.total(), 21u * s3fifo.lines);
}

// An extra block: its CRC, flags and epoch byte; a line of several blocks
// also counts its valid and dirty ones (2 x 2 bytes). (At 100,000 lines
// the adaptive policy's shadows are 5 bytes a line.)
TEST(SlotTableMemoryTest, SixtyFourKiBLinesAddAbout6BytesAnExtraBlock) {
  const Filled f = FillAndChurn(100'000, 16, 3);
  Report("64 KiB lines", f);
  EXPECT_LE(f.memory.total(), (21u + 4 + 15 * 6 + 1 + 1 + 5) * f.lines);
}

}  // namespace
}  // namespace cachecore
