// The RAM tier (issue 18): the tier's own maps and policy, then the engine
// with it: reads served from RAM without touching the cache device, every
// way a block can change forgetting its copy first, a write racing a fill,
// the setting changed online and kept, memory bounded by the setting.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "engine/ram_tier.h"
#include "support/async_requests.h"
#include "support/block_io.h"
#include "support/engine_rig.h"
#include "support/stamped_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::vector<uint8_t> Block(uint64_t seed) {
  std::vector<uint8_t> b(kBlock);
  FillPattern(b.data(), seed * kBlock, kBlock, 7);
  return b;
}

// ---- the tier alone (16 blocks a line)

TEST(RamTierTest, HoldsWhatItWasGivenAndNothingElse) {
  RamTier tier(16);
  tier.Resize(RamTier::kMinBytes);
  std::vector<uint8_t> in(4 * kBlock), out(4 * kBlock);
  for (uint32_t b = 0; b < 4; ++b) std::memcpy(in.data() + b * kBlock, Block(b + 2).data(), kBlock);
  EXPECT_FALSE(tier.Read(3, 2, 6, out.data()));
  tier.Fill(3, 2, 6, in.data());
  EXPECT_EQ(tier.held_blocks(), 4u);
  ASSERT_TRUE(tier.Read(3, 2, 6, out.data()));
  EXPECT_EQ(in, out);
  EXPECT_TRUE(tier.Read(3, 3, 4, out.data()));
  EXPECT_EQ(0, std::memcmp(out.data(), in.data() + kBlock, kBlock));
  EXPECT_FALSE(tier.Read(3, 5, 7, out.data())) << "block 6 was never given";
  EXPECT_FALSE(tier.Read(4, 2, 3, out.data())) << "another line's block";
}

TEST(RamTierTest, ForgetsBlocksAndRangesOfLines) {
  RamTier tier(4);
  tier.Resize(4 * RamTier::kMinBytes);  // room to spare in every shard
  std::vector<uint8_t> data(4 * kBlock, 1), out(4 * kBlock);
  for (uint64_t line = 0; line < 100; ++line) tier.Fill(line, 0, 4, data.data());
  ASSERT_EQ(tier.held_blocks(), 400u);
  tier.Forget(7, 1, 2);
  EXPECT_FALSE(tier.Read(7, 0, 4, out.data()));
  EXPECT_TRUE(tier.Read(7, 2, 4, out.data()));
  tier.ForgetLines(10, 20);
  EXPECT_EQ(tier.held_blocks(), 400u - 1 - 40);
  for (uint64_t line = 10; line < 20; ++line) EXPECT_FALSE(tier.Read(line, 3, 4, out.data()));
  EXPECT_TRUE(tier.Read(9, 0, 4, out.data()));
  EXPECT_TRUE(tier.Read(20, 0, 4, out.data()));
  // Many forgets and fills in one table: every block still found (the
  // backward shift of deletions keeps probe chains whole).
  for (uint64_t line = 0; line < 100; line += 3) tier.Forget(line, 0, 4);
  for (uint64_t line = 0; line < 100; ++line) {
    const bool kept = line % 3 != 0 && (line < 10 || line >= 20);
    EXPECT_EQ(tier.Read(line, 0, 4, out.data()), kept && line != 7) << line;
  }
}

TEST(RamTierTest, StaysWithinItsSizeAndMemory) {
  RamTier tier(1);
  const uint64_t bytes = 8 * kMiB;
  tier.Resize(bytes);
  EXPECT_EQ(tier.capacity_bytes(), bytes);
  const std::vector<uint8_t> data = Block(1);
  for (uint64_t line = 0; line < 4 * bytes / kBlock; ++line) tier.Fill(line, 0, 1, data.data());
  EXPECT_LE(tier.held_blocks() * kBlock, bytes);
  EXPECT_GE(tier.held_blocks() * kBlock, bytes * 9 / 10) << "a full tier keeps most frames in use";
  EXPECT_LE(tier.MemoryBytes(), bytes + bytes / 32) << "blocks plus maps and policies";
  tier.Resize(0);
  EXPECT_FALSE(tier.on());
  EXPECT_EQ(tier.held_blocks(), 0u);
  EXPECT_LT(tier.MemoryBytes(), 64 * 1024u);
  std::vector<uint8_t> out(kBlock);
  EXPECT_FALSE(tier.Read(0, 0, 1, out.data()));
}

// S3-FIFO per shard: blocks read again stay while a scan of blocks read
// once passes through.
TEST(RamTierTest, AScanDoesNotPushOutTheHotBlocks) {
  RamTier tier(1);
  tier.Resize(RamTier::kMinBytes);  // 1024 blocks
  const std::vector<uint8_t> data = Block(3);
  std::vector<uint8_t> out(kBlock);
  constexpr uint64_t kHot = 512;
  for (int round = 0; round < 3; ++round) {
    for (uint64_t line = 0; line < kHot; ++line) {
      if (!tier.Read(line, 0, 1, out.data())) tier.Fill(line, 0, 1, data.data());
    }
  }
  for (uint64_t line = 1'000'000; line < 1'000'000 + 20 * kHot; ++line) tier.Fill(line, 0, 1, data.data());
  uint64_t kept = 0;
  for (uint64_t line = 0; line < kHot; ++line) kept += tier.Read(line, 0, 1, out.data()) ? 1 : 0;
  EXPECT_GE(kept, kHot * 9 / 10) << "the scan evicted the hot set";
}

// ---- the engine with a RAM tier

class EngineRamTest : public ::testing::Test {
 protected:
  EngineRamTest() : rig_(RigOptions{.origin_size = 32 * kMiB, .cache_data_size = 8 * kMiB}) {}

  void Create(CacheMode mode, uint64_t ram = 8 * kMiB) {
    config_.line_size = 16 * 1024;
    config_.mode = mode;
    config_.background_cleaner = false;
    config_.sequential_cutoff = 0;
    config_.ram_cache_bytes = ram;
    ASSERT_TRUE(rig_.Create(config_).ok());
  }

  uint64_t RamHits() { return rig_.engine().stats().ram_hits; }

  // Reads the range until the RAM tier serves it (a miss promotes it, a
  // hit fills the tier).
  void WarmRam(uint64_t offset, uint64_t length) {
    AlignedBuffer buf(length);
    for (int i = 0; i < 3; ++i) {
      const uint64_t before = RamHits();
      ASSERT_TRUE(rig_.engine().Read(offset, buf.data(), length).ok());
      if (RamHits() == before + length / kBlock) return;
    }
    FAIL() << "three reads did not reach the RAM tier";
  }

  StampedRig rig_;
  EngineConfig config_;
};

TEST_F(EngineRamTest, HitsComeFromRamWithoutTheCacheDevice) {
  Create(CacheMode::kWriteThrough);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 256 * 1024, 1).ok());
  WarmRam(0, 256 * 1024);
  const uint64_t cache_reads = rig_.cache().operations(kFaultRead);
  const StatsSnapshot before = rig_.engine().stats();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(HasPattern(rig_.engine(), 0, 256 * 1024, 1));
  EXPECT_TRUE(HasPattern(rig_.engine(), 4096 + 512, 3072, 1)) << "a read not in whole blocks";
  const StatsSnapshot after = rig_.engine().stats();
  EXPECT_EQ(rig_.cache().operations(kFaultRead), cache_reads) << "served from RAM, not the SSD";
  EXPECT_EQ(after.ram_hits - before.ram_hits, 4u * 64 + 1);
  EXPECT_EQ(after.read_hits - before.read_hits, after.ram_hits - before.ram_hits) << "a RAM hit is a hit";
  EXPECT_GT(after.ram_hit_ratio(), 0.5);
  EXPECT_EQ(after.ram_used_bytes, 256u * 1024);
  EXPECT_EQ(after.ram_cache_bytes, 8 * kMiB);
}

// A read whose lines are partly in RAM: those come from RAM, the rest from
// the cache, in one answer; and what the cache gave fills the tier.
TEST_F(EngineRamTest, ALineInRamAndTheNextOnTheCache) {
  Create(CacheMode::kWriteThrough);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 64 * 1024, 1).ok());
  WarmRam(0, 16 * 1024);  // line 0 only
  const uint64_t cache_reads = rig_.cache().operations(kFaultRead);
  const uint64_t before = RamHits();
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 32 * 1024, 1));
  EXPECT_EQ(RamHits() - before, 4u) << "line 0's blocks";
  EXPECT_EQ(rig_.cache().operations(kFaultRead), cache_reads + 1) << "line 1 alone from the cache";
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 32 * 1024, 1));
  EXPECT_EQ(RamHits() - before, 4u + 8) << "line 1 filled the tier";
}

// A read that misses in part (the miss path) fills the tier with the
// blocks it read from the cache.
TEST_F(EngineRamTest, AMissFillsItWithWhatTheCacheHad) {
  Create(CacheMode::kWriteThrough);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 16 * 1024, 1).ok());  // line 0 cached, line 1 not
  AlignedBuffer buf(32 * 1024);
  const uint64_t misses = rig_.engine().stats().read_misses;
  ASSERT_TRUE(rig_.engine().Read(0, buf.data(), 32 * 1024).ok());
  ASSERT_EQ(rig_.engine().stats().read_misses, misses + 4) << "line 1 missed";
  const uint64_t before = RamHits();
  AlignedBuffer line0(16 * 1024);
  ASSERT_TRUE(rig_.engine().Read(0, line0.data(), 16 * 1024).ok());
  EXPECT_EQ(RamHits() - before, 4u);
}

TEST_F(EngineRamTest, OffByDefault) {
  Create(CacheMode::kWriteThrough, 0);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 64 * 1024, 1).ok());
  AlignedBuffer buf(64 * 1024);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(rig_.engine().Read(0, buf.data(), 64 * 1024).ok());
  EXPECT_EQ(RamHits(), 0u);
  EXPECT_EQ(rig_.engine().stats().ram_cache_bytes, 0u);
}

TEST_F(EngineRamTest, AReadPastTheSequentialCutoffDoesNotFillIt) {
  Create(CacheMode::kWriteThrough);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 4 * kMiB, 1).ok());
  ASSERT_TRUE(rig_.engine().SetSequentialCutoff(256 * 1024).ok());
  AlignedBuffer buf(64 * 1024);
  for (int pass = 0; pass < 3; ++pass) {
    for (uint64_t at = 0; at < 4 * kMiB; at += 64 * 1024) ASSERT_TRUE(rig_.engine().Read(at, buf.data(), 64 * 1024).ok());
  }
  // The stream's first 256 KiB are not past the cutoff yet: only they fill.
  EXPECT_LE(rig_.engine().stats().ram_used_bytes, 256u * 1024 + 64 * 1024);
}

// Every way a block changes makes the tier forget it: the next read gets
// the new data (or, after a trim, does not come from RAM).
struct Change {
  const char* name;
  CacheMode mode;
  void (*apply)(Engine& e);
  bool trim;
};

class RamForgetTest : public EngineRamTest, public ::testing::WithParamInterface<Change> {};

TEST_P(RamForgetTest, TheNextReadIsNotTheOldCopy) {
  const Change& c = GetParam();
  Create(c.mode);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 64 * 1024, 1).ok());
  WarmRam(0, 64 * 1024);
  c.apply(rig_.engine());
  if (c.trim) {
    const uint64_t before = RamHits();
    AlignedBuffer buf(64 * 1024);
    ASSERT_TRUE(rig_.engine().Read(0, buf.data(), 64 * 1024).ok());
    EXPECT_EQ(RamHits(), before) << "a trimmed block came from RAM";
    return;
  }
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 64 * 1024, 2));
  WarmRam(0, 64 * 1024);  // and the new data goes into the tier in turn
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 64 * 1024, 2));
}

void Rewrite(Engine& e) { ASSERT_TRUE(WritePattern(e, 0, 64 * 1024, 2).ok()); }
void RewriteFua(Engine& e) { ASSERT_TRUE(WritePattern(e, 0, 64 * 1024, 2, true).ok()); }
// In 512-byte pieces, each a write with partial blocks (the edges path).
void RewriteInSectors(Engine& e) {
  AlignedBuffer b(64 * 1024);
  FillPattern(b.data(), 0, 64 * 1024, 2);
  for (uint64_t at = 0; at < 64 * 1024; at += 512) ASSERT_TRUE(e.Write(at, b.data() + at, 512).ok());
}
// A write past the sequential cutoff bypasses the cache.
void RewriteAsAStream(Engine& e) {
  ASSERT_TRUE(e.SetSequentialCutoff(16 * 1024).ok());
  AlignedBuffer b(16 * 1024);
  for (uint64_t at = 0; at < 64 * 1024; at += 16 * 1024) {
    FillPattern(b.data(), at, 16 * 1024, 2);
    ASSERT_TRUE(e.Write(at, b.data(), 16 * 1024).ok());
  }
  ASSERT_GT(e.stats().bypassed, 0u);
  ASSERT_TRUE(e.SetSequentialCutoff(0).ok());
}
void Trim(Engine& e) { ASSERT_TRUE(e.Discard(0, 64 * 1024).ok()); }
void TrimASector(Engine& e) {
  for (uint64_t at = 0; at < 64 * 1024; at += 4096) ASSERT_TRUE(e.Discard(at + 512, 512).ok());
}
void SwitchToPassThroughAndWrite(Engine& e) {
  ASSERT_TRUE(e.SetMode(CacheMode::kPassThrough).ok());
  Rewrite(e);
  ASSERT_TRUE(e.SetMode(CacheMode::kWriteThrough).ok());
}

INSTANTIATE_TEST_SUITE_P(
    Changes, RamForgetTest,
    ::testing::Values(Change{"WriteBack", CacheMode::kWriteBack, Rewrite, false},
                      Change{"WriteBackFua", CacheMode::kWriteBack, RewriteFua, false},
                      Change{"WriteThrough", CacheMode::kWriteThrough, Rewrite, false},
                      Change{"WriteAround", CacheMode::kWriteAround, Rewrite, false},
                      Change{"PassThrough", CacheMode::kWriteThrough, SwitchToPassThroughAndWrite, false},
                      Change{"SectorsWriteBack", CacheMode::kWriteBack, RewriteInSectors, false},
                      Change{"SectorsWriteThrough", CacheMode::kWriteThrough, RewriteInSectors, false},
                      Change{"StreamWriteBack", CacheMode::kWriteBack, RewriteAsAStream, false},
                      Change{"StreamWriteThrough", CacheMode::kWriteThrough, RewriteAsAStream, false},
                      Change{"Trim", CacheMode::kWriteBack, Trim, true},
                      Change{"TrimSectors", CacheMode::kWriteThrough, TrimASector, true}),
    [](const ::testing::TestParamInfo<Change>& info) { return std::string(info.param.name); });

// A write that comes while a hit fills the tier waits for the hit's lines
// (their stripes, held from the cache read to the fill), then forgets the
// copy: it can never land between the read and the fill and leave the
// tier with the data it replaced. Filling after letting the lines go
// failed this test.
TEST_F(EngineRamTest, AWriteDuringAFillIsNeverUndone) {
  Create(CacheMode::kWriteBack);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 16 * 1024, 1).ok());
  std::future<Status> write;
  bool landed_during_fill = false;
  OnStepOnce("ram-1-filling", [&] {
    write = std::async(std::launch::async, [&] { return WritePattern(rig_.engine(), 0, 16 * 1024, 2); });
    landed_during_fill = write.wait_for(std::chrono::milliseconds(300)) == std::future_status::ready;
  });
  AlignedBuffer buf(16 * 1024);
  ASSERT_TRUE(rig_.engine().Read(0, buf.data(), 16 * 1024).ok());  // a hit: it fills the tier
  ClearStepAction();
  ASSERT_TRUE(write.valid()) << "the hit did not fill the tier";
  ASSERT_TRUE(write.get().ok());
  EXPECT_FALSE(landed_during_fill) << "the write ran while the hit held its lines";
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 16 * 1024, 2));
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 16 * 1024, 2));
}

TEST_F(EngineRamTest, EvictingAVolumeEmptiesItsShare) {
  Create(CacheMode::kWriteBack);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 64 * 1024, 1).ok());
  WarmRam(0, 64 * 1024);
  ASSERT_TRUE(rig_.engine().EvictVolume(rig_.first_volume_name).ok());
  EXPECT_EQ(rig_.engine().stats().ram_used_bytes, 0u);
  // Written around the cache meanwhile (an online volume given its own
  // table back): the next read is the origin's.
  AlignedBuffer b(64 * 1024);
  FillPattern(b.data(), 0, 64 * 1024, 3);
  ASSERT_TRUE(rig_.raw_origin().Write(0, b.data(), 64 * 1024).ok());
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 64 * 1024, 3));
}

TEST_F(EngineRamTest, ChangedOnlineAndKept) {
  Create(CacheMode::kWriteThrough, 0);
  ASSERT_TRUE(WritePattern(rig_.engine(), 0, 64 * 1024, 1).ok());
  EXPECT_EQ(rig_.engine().SetRamCache(kMiB).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rig_.engine().settings().ram_cache_bytes, 0u) << "a refused size changes nothing";
  ASSERT_TRUE(rig_.engine().SetRamCache(16 * kMiB).ok());
  WarmRam(0, 64 * 1024);
  ASSERT_TRUE(rig_.Restart(config_).ok());  // config_ says 0: the saved size wins
  EXPECT_EQ(rig_.engine().settings().ram_cache_bytes, 16 * kMiB);
  EXPECT_EQ(rig_.engine().stats().ram_used_bytes, 0u) << "the tier starts empty";
  WarmRam(0, 64 * 1024);
  ASSERT_TRUE(rig_.engine().SetRamCache(0).ok());
  EXPECT_EQ(rig_.engine().stats().ram_used_bytes, 0u);
  const uint64_t before = RamHits();
  EXPECT_TRUE(HasPattern(rig_.engine(), 0, 64 * 1024, 1));
  EXPECT_EQ(RamHits(), before);
}

// Readers, writers and resizes at once on a few hot blocks: every read
// returns a whole block of a write that was issued, never one older than
// a write that completed before the read began. Each block has one writer,
// so its writes land in order.
TEST_F(EngineRamTest, ConcurrentWritesNeverLeaveAStaleCopy) {
  Create(CacheMode::kWriteBack, RamTier::kMinBytes);
  constexpr uint64_t kBlocks = 8, kWriters = 2;
  std::array<std::atomic<uint64_t>, kBlocks> completed{}, issued{};
  for (uint64_t b = 0; b < kBlocks; ++b) {
    rig_.WriteStamped(b, 1);
    completed[b] = issued[b] = 1;
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> failures{0}, reads{0};
  std::vector<std::thread> threads;
  for (uint64_t w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (uint64_t i = 0; !stop; ++i) {
        const uint64_t b = w + kWriters * (i % (kBlocks / kWriters));
        const uint64_t id = completed[b].load() + 1;
        issued[b] = id;
        rig_.WriteStamped(b, id);
        completed[b] = id;
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // reads fill the tier between writes
      }
    });
  }
  for (uint64_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      for (uint64_t i = r; !stop; ++i) {
        const uint64_t b = i % kBlocks;
        const uint64_t floor = completed[b].load();
        const uint64_t got = rig_.ReadStamped(b);
        if (got < floor || got > issued[b].load()) failures.fetch_add(1);
        reads.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(rig_.engine().SetRamCache(i % 5 == 4 ? 0 : RamTier::kMinBytes).ok());
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0u) << "of " << reads.load() << " reads";
  EXPECT_GT(RamHits(), 0u) << "the tier served none of it";
}

}  // namespace
}  // namespace cachecore::testing
