// The fault matrix of docs/reliability.md: {cache device, origin} x {read,
// write, flush} x {transient, persistent} x {write-through, write-back,
// write-around, read-only}, one test per cell.
//
// Each cell starts from the same state: blocks 0-7 hold data A and are
// cached (dirty in write-back, clean otherwise), blocks 8-15 hold A on the
// origin only; everything synced. Then the cell's operation runs under the
// fault: "read" reads block 0 (a hit) and block 8 (a miss); "write" writes
// B to both and reads them back; "flush" writes B to both, then flushes
// (the client's FLUSH) and cleans (cachectl flush). The table says what the
// client sees; after the fault is gone every block must read A or, where a
// write was acknowledged, B, and a detach must leave the same on the origin.
#include <gtest/gtest.h>

#include "support/block_io.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kBlock = 4096;
constexpr uint32_t kTagA = 0xA, kTagB = 0xB;
constexpr int kPersistentRounds = 6;  // enough to pass the error threshold below
constexpr uint64_t kThreshold = 4;

enum class Dev { kCache, kOrigin };
enum class Op { kRead, kWrite, kFlush };
// What the client sees from the operation while the fault is there.
enum class Outcome {
  kOk,                  // every attempt succeeds
  kFailsOnce,           // transient: the first attempt fails, the retry works
  kFailsWhileFaulty,    // persistent: every attempt fails until the fault goes
  kFailsUntilFailover,  // persistent: fails until the cache device is failed out
};

struct Row {
  Dev dev;
  Op op;
  bool persistent;
  Outcome wt, wb, wa, ro;  // by mode
  bool fails_over;         // the cache passes its error threshold (stats "failed")
};

using O = Outcome;
// The table of docs/reliability.md, row for row.
const Row kTable[] = {
    // cache device
    {Dev::kCache, Op::kRead, false, O::kOk, O::kFailsOnce, O::kOk, O::kOk, false},
    {Dev::kCache, Op::kRead, true, O::kOk, O::kFailsWhileFaulty, O::kOk, O::kOk, true},
    {Dev::kCache, Op::kWrite, false, O::kOk, O::kOk, O::kOk, O::kOk, false},
    {Dev::kCache, Op::kWrite, true, O::kOk, O::kOk, O::kOk, O::kOk, true},
    {Dev::kCache, Op::kFlush, false, O::kOk, O::kFailsOnce, O::kOk, O::kOk, false},
    {Dev::kCache, Op::kFlush, true, O::kOk, O::kFailsUntilFailover, O::kOk, O::kOk, true},
    // origin
    {Dev::kOrigin, Op::kRead, false, O::kFailsOnce, O::kFailsOnce, O::kFailsOnce, O::kFailsOnce, false},
    {Dev::kOrigin, Op::kRead, true, O::kFailsWhileFaulty, O::kFailsWhileFaulty, O::kFailsWhileFaulty,
     O::kFailsWhileFaulty, false},
    {Dev::kOrigin, Op::kWrite, false, O::kFailsOnce, O::kOk, O::kFailsOnce, O::kFailsOnce, false},
    {Dev::kOrigin, Op::kWrite, true, O::kFailsWhileFaulty, O::kOk, O::kFailsWhileFaulty,
     O::kFailsWhileFaulty, false},
    {Dev::kOrigin, Op::kFlush, false, O::kFailsOnce, O::kFailsOnce, O::kFailsOnce, O::kFailsOnce, false},
    {Dev::kOrigin, Op::kFlush, true, O::kFailsWhileFaulty, O::kFailsWhileFaulty, O::kFailsWhileFaulty,
     O::kFailsWhileFaulty, false},
};

const CacheMode kModes[] = {CacheMode::kWriteThrough, CacheMode::kWriteBack,
                            CacheMode::kWriteAround, CacheMode::kReadOnly};

Outcome ExpectedFor(const Row& row, CacheMode mode) {
  switch (mode) {
    case CacheMode::kWriteThrough: return row.wt;
    case CacheMode::kWriteBack: return row.wb;
    case CacheMode::kWriteAround: return row.wa;
    default: return row.ro;
  }
}

struct Cell {
  Row row;
  CacheMode mode;
};

class FaultMatrixTest : public ::testing::TestWithParam<Cell> {
 protected:
  FaultMatrixTest() : rig_(Options()) {}
  static RigOptions Options() {
    RigOptions o;
    o.volatile_caches = false;
    return o;
  }

  void SetUp() override {
    config_.mode = GetParam().mode;
    config_.line_size = kBlock;
    config_.sequential_cutoff = 0;
    config_.background_cleaner = false;
    config_.error_threshold = kThreshold;
    ASSERT_TRUE(rig_.Create(config_).ok());
    Engine& e = rig_.engine();
    AlignedBuffer a(16 * kBlock);
    FillPattern(a.data(), 0, 16 * kBlock, kTagA);
    if (config_.mode == CacheMode::kWriteBack || config_.mode == CacheMode::kWriteThrough) {
      ASSERT_TRUE(e.Write(0, a.data(), 8 * kBlock).ok());
      ASSERT_TRUE(rig_.raw_origin().Write(8 * kBlock, a.data() + 8 * kBlock, 8 * kBlock).ok());
    } else {
      ASSERT_TRUE(rig_.raw_origin().Write(0, a.data(), 16 * kBlock).ok());
      for (uint64_t b = 0; b < 8; ++b) ASSERT_TRUE(HasPattern(e, b * kBlock, kBlock, kTagA));
    }
    ASSERT_TRUE(e.Sync().ok());
    StatsSnapshot st = e.stats();
    ASSERT_EQ(st.occupancy_lines, 8u);
    ASSERT_EQ(st.dirty_lines, config_.mode == CacheMode::kWriteBack ? 8u : 0u);
    for (uint64_t b = 0; b < 16; ++b) maybe_b_[b] = false;
  }

  FaultDevice& Target() { return GetParam().row.dev == Dev::kCache ? rig_.cache() : rig_.origin(); }
  unsigned Kind() const {
    switch (GetParam().row.op) {
      case Op::kRead: return kFaultRead;
      case Op::kWrite: return kFaultWrite;
      default: return kFaultFlush;
    }
  }

  // The cell's operation, as a client would run it; the first error wins.
  Status RunOperation() {
    Engine& e = rig_.engine();
    AlignedBuffer buf(kBlock);
    Status first = Status::Ok();
    auto note = [&](Status s) { if (first.ok() && !s.ok()) first = s; };
    if (GetParam().row.op == Op::kRead) {
      note(e.Read(0, buf.data(), kBlock));
      note(e.Read(8 * kBlock, buf.data(), kBlock));
      return first;
    }
    for (uint64_t b : {0, 8}) {
      maybe_b_[b] = true;  // a failed write may or may not have landed
      note(WritePattern(e, b * kBlock, kBlock, kTagB));
    }
    if (GetParam().row.op == Op::kWrite) {
      for (uint64_t b : {0, 8}) note(e.Read(b * kBlock, buf.data(), kBlock));
      return first;
    }
    note(e.Sync());
    note(e.Flush());
    return first;
  }

  // Every block reads A, or B where a write of B was issued; while a read
  // fault lasts a read may fail instead, but never return other data.
  void ExpectConsistent(const char* when, bool reads_may_fail) {
    SCOPED_TRACE(when);
    AlignedBuffer got(kBlock), a(kBlock), b(kBlock);
    for (uint64_t blk = 0; blk < 16; ++blk) {
      Status s = rig_.engine().Read(blk * kBlock, got.data(), kBlock);
      if (!s.ok()) {
        EXPECT_TRUE(reads_may_fail) << "block " << blk << ": " << s.ToString();
        continue;
      }
      FillPattern(a.data(), blk * kBlock, kBlock, kTagA);
      FillPattern(b.data(), blk * kBlock, kBlock, kTagB);
      bool is_a = std::memcmp(got.data(), a.data(), kBlock) == 0;
      bool is_b = maybe_b_[blk] && std::memcmp(got.data(), b.data(), kBlock) == 0;
      EXPECT_TRUE(is_a || is_b) << "block " << blk << " holds neither its old nor its new data";
    }
  }

  EngineRig rig_;
  EngineConfig config_;
  bool maybe_b_[16];
};

TEST_P(FaultMatrixTest, ClientSeesWhatTheTableSays) {
  const Row& row = GetParam().row;
  const Outcome expected = ExpectedFor(row, GetParam().mode);
  if (row.persistent) {
    Target().FailAlways(Kind());
  } else {
    Target().FailNth(Kind(), 1);
  }

  const int rounds = row.persistent ? kPersistentRounds : 2;
  std::vector<bool> ok;
  for (int i = 0; i < rounds; ++i) ok.push_back(RunOperation().ok());
  switch (expected) {
    case Outcome::kOk:
      for (int i = 0; i < rounds; ++i) EXPECT_TRUE(ok[i]) << "attempt " << i + 1 << " failed";
      break;
    case Outcome::kFailsOnce:
      EXPECT_FALSE(ok[0]) << "the fault did not reach the client";
      EXPECT_TRUE(ok[1]) << "the retry after a transient fault failed";
      break;
    case Outcome::kFailsWhileFaulty:
      for (int i = 0; i < rounds; ++i) EXPECT_FALSE(ok[i]) << "attempt " << i + 1 << " succeeded";
      break;
    case Outcome::kFailsUntilFailover:
      EXPECT_FALSE(ok[0]);
      EXPECT_TRUE(ok[rounds - 1]) << "still failing after the cache device was failed out";
      break;
  }
  StatsSnapshot st = rig_.engine().stats();
  EXPECT_EQ(st.failed, row.fails_over);
  const ErrorCounts& err = st.errors;
  uint64_t counted = row.dev == Dev::kCache
                         ? (row.op == Op::kRead ? err.cache_read
                            : row.op == Op::kWrite ? err.cache_write : err.cache_flush)
                         : (row.op == Op::kRead ? err.origin_read
                            : row.op == Op::kWrite ? err.origin_write : err.origin_flush);
  // A write-back cache absorbs origin write faults until it cleans (the
  // cleaner is off here); every other fault the client's I/O met is counted.
  bool reached = !(row.dev == Dev::kOrigin && row.op == Op::kWrite &&
                   GetParam().mode == CacheMode::kWriteBack);
  if (reached) {
    EXPECT_GE(counted, 1u) << "the fault is not in the statistics";
  }
  ExpectConsistent("under the fault", row.op == Op::kRead);

  // The fault goes (the device is replaced or recovers): everything works,
  // nothing was lost, and the origin ends up with exactly what was read.
  Target().ClearFaults();
  EXPECT_TRUE(RunOperation().ok()) << "the operation fails after the fault is gone";
  ASSERT_TRUE(rig_.engine().Flush().ok());
  ExpectConsistent("after the fault", false);
  AlignedBuffer seen(16 * kBlock), origin(16 * kBlock);
  ASSERT_TRUE(rig_.engine().Read(0, seen.data(), 16 * kBlock).ok());
  ASSERT_TRUE(rig_.engine().Detach().ok());
  ASSERT_TRUE(rig_.raw_origin().Read(0, origin.data(), 16 * kBlock).ok());
  EXPECT_EQ(std::memcmp(seen.data(), origin.data(), 16 * kBlock), 0)
      << "after detach the origin differs from what the cache returned";
}

std::vector<Cell> AllCells() {
  std::vector<Cell> cells;
  for (const Row& row : kTable) {
    for (CacheMode mode : kModes) cells.push_back({row, mode});
  }
  return cells;
}

std::string CellName(const ::testing::TestParamInfo<Cell>& info) {
  const Row& r = info.param.row;
  std::string name = r.dev == Dev::kCache ? "cache_" : "origin_";
  name += r.op == Op::kRead ? "read_" : r.op == Op::kWrite ? "write_" : "flush_";
  name += r.persistent ? "persistent_" : "transient_";
  std::string mode = CacheModeName(info.param.mode);
  for (char& c : mode) {
    if (c == '-') c = '_';
  }
  return name + mode;
}

INSTANTIATE_TEST_SUITE_P(Cells, FaultMatrixTest, ::testing::ValuesIn(AllCells()), CellName);

}  // namespace
}  // namespace cachecore::testing
