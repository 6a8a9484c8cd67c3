// A full or failing metadata disk: the store's log appends or syncs fail
// (ENOSPC, then EIO). The engine must not abort (Debian's RocksDB, built
// with assertions, aborts at a log sync after a failed log write), must
// answer writes, trims and flushes with an I/O error, keep serving reads,
// say metadata_failed in its stats, and, once restarted over the same
// store, hold every sector that was flushed before the failure.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "support/stamped_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kBlocks = 64;

struct Fault {
  const char* name;
  rocksdb::IOStatus append, sync;
};

Fault FaultOf(int i) {
  switch (i) {
    case 0: return {"NoSpaceOnAppend", rocksdb::IOStatus::NoSpace("injected ENOSPC"), rocksdb::IOStatus::OK()};
    case 1: return {"IoErrorOnAppend", rocksdb::IOStatus::IOError("injected EIO"), rocksdb::IOStatus::OK()};
    case 2: return {"NoSpaceOnSync", rocksdb::IOStatus::OK(), rocksdb::IOStatus::NoSpace("injected ENOSPC")};
    default: return {"IoErrorOnSync", rocksdb::IOStatus::OK(), rocksdb::IOStatus::IOError("injected EIO")};
  }
}

class MetadataFailureTest : public ::testing::TestWithParam<std::tuple<int, CacheMode>> {
 protected:
  void SetUp() override {
    config_.line_size = 4096;
    config_.mode = std::get<1>(GetParam());
    config_.background_cleaner = true;
    config_.dirty_target_pct = 2;  // the cleaner works while the store fails
    config_.dirty_high_pct = 10;
    config_.dirty_low_pct = 5;
    ASSERT_TRUE(rig_.Create(config_).ok());
  }

  // Writes every block with `id` and syncs: what must survive.
  void WriteFlushed(uint64_t id) {
    for (uint64_t b = 0; b < kBlocks; ++b) rig_.WriteStamped(b, id);
    ASSERT_TRUE(rig_.engine().Sync().ok());
  }

  void Fail() {
    Fault f = FaultOf(std::get<0>(GetParam()));
    rig_.store_fs().FailWrites(f.append, f.sync);
  }

  // What cachectl stop, then start, does: the engine goes (its shutdown
  // fails), the store is closed and opened again (RocksDB's recovery),
  // over a disk that works again.
  void StopAndStart() {
    rig_.DropEngine();
    rig_.CloseStore();
    rig_.store_fs().Heal();
    ASSERT_TRUE(rig_.OpenStore().ok());
    Status s = rig_.Open(config_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  StampedRig rig_;
  EngineConfig config_;
};

TEST_P(MetadataFailureTest, WritesFailReadsGoOnFlushedDataSurvivesARestart) {
  WriteFlushed(1);
  Fail();
  // A write that needs the store fails with an I/O error; so does every
  // later write and flush, even one that would need no record.
  Status first = Status::Ok();
  for (uint64_t b = 0; b < kBlocks && first.ok(); ++b) {
    AlignedBuffer buf(4096);
    for (uint64_t s = 0; s < 8; ++s) StampSector(buf.data() + s * 512, 2, b * 8 + s);
    first = rig_.engine().Write(b * 4096, buf.data(), 4096, /*fua=*/b % 4 == 3);
    if (first.ok()) first = rig_.engine().Sync();
  }
  ASSERT_FALSE(first.ok()) << "no write or flush noticed the failing store";
  EXPECT_EQ(first.code(), StatusCode::kIoError) << first.ToString();
  EXPECT_TRUE(rig_.engine().stats().metadata_failed);
  AlignedBuffer buf(4096);
  Status later = rig_.engine().Write(0, buf.data(), 4096);
  EXPECT_EQ(later.code(), StatusCode::kIoError) << later.ToString();
  EXPECT_NE(later.message().find("metadata store failed"), std::string::npos) << later.ToString();
  EXPECT_FALSE(rig_.engine().Sync().ok());
  EXPECT_FALSE(rig_.engine().Flush().ok());
  EXPECT_FALSE(rig_.engine().Discard(0, 4096).ok());
  // Reads go on: every block is its flushed write or the write that failed.
  for (uint64_t b = 0; b < kBlocks; ++b) {
    uint64_t got = rig_.ReadStamped(b);
    EXPECT_TRUE(got == 1 || got == 2) << "block " << b << " reads as write " << got;
  }
  StopAndStart();
  EXPECT_FALSE(rig_.engine().stats().metadata_failed);
  for (uint64_t b = 0; b < kBlocks; ++b) {
    uint64_t got = rig_.ReadStamped(b);
    EXPECT_TRUE(got == 1 || got == 2) << "after the restart block " << b << " reads as " << got;
  }
  WriteFlushed(3);  // the cache goes on
  StopAndStart();
  for (uint64_t b = 0; b < kBlocks; ++b) EXPECT_EQ(rig_.ReadStamped(b), 3u) << "block " << b;
}

// Clients keep writing and flushing from several threads while the store
// fails under them: no abort, and everything flushed before survives.
TEST_P(MetadataFailureTest, ConcurrentWritersAndFlushesNeverAbort) {
  WriteFlushed(1);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> errors{0};
  std::vector<std::thread> clients;
  for (uint64_t t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      AlignedBuffer buf(4096);
      for (uint64_t i = 0; !stop.load(); ++i) {
        const uint64_t b = (t * 16 + i) % kBlocks;
        for (uint64_t s = 0; s < 8; ++s) StampSector(buf.data() + s * 512, 100 + t, b * 8 + s);
        Status s = rig_.engine().Write(b * 4096, buf.data(), 4096, i % 7 == 0);
        if (s.ok() && i % 5 == 0) s = rig_.engine().Sync();
        if (!s.ok()) errors.fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Fail();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stop.store(true);
  for (auto& c : clients) c.join();
  EXPECT_GT(errors.load(), 0u);
  EXPECT_TRUE(rig_.engine().stats().metadata_failed);
  StopAndStart();
  for (uint64_t b = 0; b < kBlocks; ++b) {
    uint64_t got = rig_.ReadStamped(b);
    EXPECT_TRUE(got == 1 || (got >= 100 && got < 104)) << "block " << b << " reads as " << got;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Faults, MetadataFailureTest,
    ::testing::Combine(::testing::Range(0, 4),
                       ::testing::Values(CacheMode::kWriteBack, CacheMode::kWriteThrough)),
    [](const auto& info) {
      return std::string(FaultOf(std::get<0>(info.param)).name) +
             (std::get<1>(info.param) == CacheMode::kWriteBack ? "WriteBack" : "WriteThrough");
    });

}  // namespace
}  // namespace cachecore::testing
