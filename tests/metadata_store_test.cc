// MetadataStore: record encoding, corruption detection, identity and
// configuration, and what survives a power cut (only what was synced).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cachecore/metadata/metadata_store.h"
#include "support/engine_rig.h"
#include "support/power_cut_fs.h"

namespace cachecore::testing {
namespace {

LineRecord SampleRecord(uint64_t origin_line, size_t blocks) {
  LineRecord r;
  r.origin_line = origin_line;
  for (size_t i = 0; i < blocks; ++i) {
    r.classes.push_back(static_cast<BlockClass>(i % 6));
    r.crcs.push_back(static_cast<uint32_t>(i * 7919 + origin_line));
  }
  return r;
}

TEST(LineRecordTest, RoundTrips) {
  for (size_t blocks : {1, 16, 256}) {
    LineRecord r = SampleRecord(12345, blocks);
    Result<LineRecord> back = DecodeLineRecord(EncodeLineRecord(r));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->origin_line, r.origin_line);
    EXPECT_EQ(back->classes, r.classes);
    EXPECT_EQ(back->crcs, r.crcs);
  }
}

TEST(LineRecordTest, DetectsDamage) {
  std::string v = EncodeLineRecord(SampleRecord(7, 16));
  std::string flipped = v;
  flipped[12] ^= 0x40;
  EXPECT_EQ(DecodeLineRecord(flipped).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeLineRecord(v.substr(0, v.size() - 3)).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeLineRecord("").status().code(), StatusCode::kCorruption);
}

class StoreTest : public ::testing::Test {
 protected:
  void Open() {
    MetadataOptions mo;
    mo.create_if_missing = true;
    mo.env = storage_.env.get();
    Result<std::unique_ptr<MetadataStore>> s = MetadataStore::Open(dir_.path() + "/md", mo);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s.value());
  }
  void PowerCut() {
    storage_.fs->PowerCut();
    store_.reset();
    storage_.fs->Restore();
    Open();
  }
  TempDir dir_;
  PowerCutStorage storage_ = NewPowerCutStorage();
  std::unique_ptr<MetadataStore> store_;
};

TEST_F(StoreTest, MissingStoreIsNotFound) {
  MetadataOptions mo;
  Result<std::unique_ptr<MetadataStore>> s = MetadataStore::Open(dir_.path() + "/none", mo);
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find(dir_.path() + "/none"), std::string::npos);
}

TEST_F(StoreTest, IdentityAndConfigRoundTrip) {
  Open();
  EXPECT_EQ(store_->GetIdentity().status().code(), StatusCode::kNotFound);
  CacheIdentity id;
  id.uuid = NewRandomUuid();
  id.origin_size = 1 << 30;
  id.origin_identity = "file:/dev/origin";
  id.line_size = 65536;
  id.line_count = 999;
  ASSERT_TRUE(store_->PutIdentity(id, true).ok());
  ASSERT_TRUE(store_->PutConfig("mode", "writeback", true).ok());
  store_.reset();
  Open();
  Result<CacheIdentity> back = store_->GetIdentity();
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(DescribeIdentityDifference(id, back.value(), "a", "b"), "");
  EXPECT_EQ(store_->GetConfig("mode").value(), "writeback");
}

TEST_F(StoreTest, PowerCutKeepsSyncedLosesUnsynced) {
  Open();
  MetadataStore::Batch batch;
  batch.PutLine(1, SampleRecord(10, 4));
  ASSERT_TRUE(store_->Apply(batch, false).ok());
  ASSERT_TRUE(store_->Sync().ok());
  MetadataStore::Batch later;
  later.PutLine(2, SampleRecord(20, 4));
  ASSERT_TRUE(store_->Apply(later, false).ok());
  PowerCut();
  std::vector<uint64_t> slots;
  ASSERT_TRUE(store_->ForEachLine([&](uint64_t slot, const LineRecord&) {
    slots.push_back(slot);
    return Status::Ok();
  }).ok());
  EXPECT_EQ(slots, std::vector<uint64_t>{1});
}

TEST_F(StoreTest, ForEachLineVisitsInSlotOrder) {
  Open();
  MetadataStore::Batch batch;
  for (uint64_t slot : {300u, 2u, 70000u, 1u}) batch.PutLine(slot, SampleRecord(slot, 1));
  ASSERT_TRUE(store_->Apply(batch, true).ok());
  std::vector<uint64_t> slots;
  ASSERT_TRUE(store_->ForEachLine([&](uint64_t slot, const LineRecord& r) {
    EXPECT_EQ(r.origin_line, slot);
    slots.push_back(slot);
    return Status::Ok();
  }).ok());
  EXPECT_EQ(slots, (std::vector<uint64_t>{1, 2, 300, 70000}));
  ASSERT_TRUE(store_->DeleteAllLines().ok());
  size_t left = 0;
  ASSERT_TRUE(store_->ForEachLine([&](uint64_t, const LineRecord&) { ++left; return Status::Ok(); }).ok());
  EXPECT_EQ(left, 0u);
}

// How `cachectl rebuild` starts a daemon: the command reads the store, then
// forks the daemon, which opens it to write. RocksDB's background threads
// are one pool per process; had the command's read started them, the
// forked daemon would have a pool that believes its threads run, and its
// first memtable flush (a shutdown's, or full memtables) would wait
// forever. So a read-only open starts no thread, and the child's flush
// finishes.
// RocksDB's pool threads name themselves "rocksdb:low", "rocksdb:high".
size_t RocksDbThreadsOfThisProcess() {
  size_t n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    n += name.rfind("rocksdb", 0) == 0 ? 1 : 0;
  }
  return n;
}

int WriteAndFlushInAChild(const std::string& path, bool create) {
  const pid_t child = fork();
  if (child == 0) {
    alarm(60);  // a flush that waits forever: killed, and the parent sees it
    MetadataOptions mo;
    mo.create_if_missing = create;
    auto store = MetadataStore::Open(path, mo);
    MetadataStore::Batch batch;
    batch.PutLine(1, SampleRecord(10, 4));
    const bool ok = store.ok() && store.value()->Apply(batch, true).ok() &&
                    store.value()->FlushMemtables().ok();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(StoreForkTest, ADaemonForkedAfterAReadOnlyOpenCanFlush) {
  TempDir dir;
  const std::string path = dir.path() + "/md";
  ASSERT_EQ(WriteAndFlushInAChild(path, true), 0) << "creating the store";
  {
    MetadataOptions mo;
    mo.read_only = true;
    auto store = MetadataStore::Open(path, mo);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(store.value()->GetCompletedFlush().ok());
    EXPECT_EQ(RocksDbThreadsOfThisProcess(), 0u) << "a read-only open started RocksDB's threads";
  }
  EXPECT_EQ(WriteAndFlushInAChild(path, false), 0) << "the forked writer's flush (128+14: it hung)";
}

}  // namespace
}  // namespace cachecore::testing
