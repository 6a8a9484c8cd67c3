// A warm start takes the records as they are: a record built before the
// store's last completed flush is stable, so nothing is rewritten after a
// clean shutdown, nor after a crash that followed a flush. And a cache made
// by the version-1 engine (tests/fixtures: made by make_format_v1.cc,
// built against the code as of commit ad4c8e7, the last to write format 1)
// is upgraded in place at its start, with its dirty data, and so is one
// made in format 2 (make_format_v2.cc); a format this build does not know
// is refused and nothing is written.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "cachecore/devices/file_device.h"
#include "cachecore/engine/steps.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

// ---- a start after a flush rewrites nothing

class WarmStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.line_size = 4096;
    config_.background_cleaner = false;
    config_.sequential_cutoff = 0;
    config_.mode = CacheMode::kWriteBack;
    ASSERT_TRUE(rig_.Create(config_).ok());
    AlignedBuffer data(64 * 4096);
    std::memset(data.data(), 0x5a, 64 * 4096);
    ASSERT_TRUE(rig_.engine().Write(0, data.data(), 64 * 4096).ok());  // 64 dirty lines
    ASSERT_TRUE(rig_.engine().Write(4096, data.data(), 4096).ok());    // one rewritten in place
  }
  // The process dies: what reached the devices and the store stays (no
  // power cut), nothing more is flushed, no clean shutdown is recorded.
  void Crash() {
    rig_.origin().FailAlways(kFaultAll);
    rig_.cache().FailAlways(kFaultAll);
    rig_.DropEngine();  // its shutdown fails at the devices
    rig_.CloseStore();
    rig_.origin().ClearFaults();
    rig_.cache().ClearFaults();
    ASSERT_TRUE(rig_.OpenStore().ok());
  }
  EngineRig rig_;
  EngineConfig config_;
};

TEST_F(WarmStartTest, AfterACleanShutdownNoRecordIsRewritten) {
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  const uint64_t sequence = rig_.store().LatestSequence();
  ASSERT_TRUE(rig_.Open(config_).ok());
  EXPECT_EQ(rig_.store().LatestSequence(), sequence) << "the start wrote to the store";
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 64u);
}

TEST_F(WarmStartTest, AfterACrashFollowingAFlushNoRecordIsRewritten) {
  ASSERT_TRUE(rig_.engine().Sync().ok());
  Crash();
  const uint64_t sequence = rig_.store().LatestSequence();
  ASSERT_TRUE(rig_.Open(config_).ok());
  EXPECT_EQ(rig_.store().LatestSequence(), sequence) << "the start wrote to the store";
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 64u);
}

// Records written after the last flush are proven against the data and
// rewritten, and only they.
TEST_F(WarmStartTest, AfterACrashOnlyTheRecordsSinceTheLastFlushAreRewritten) {
  ASSERT_TRUE(rig_.engine().Sync().ok());
  AlignedBuffer data(4096);
  std::memset(data.data(), 0x33, 4096);
  ASSERT_TRUE(rig_.engine().Write(100 * 4096, data.data(), 4096).ok());  // a new line, unflushed
  ASSERT_TRUE(rig_.engine().Write(2 * 4096, data.data(), 4096).ok());    // a flushed line rewritten
  Crash();
  const uint64_t sequence = rig_.store().LatestSequence();
  ASSERT_TRUE(rig_.Open(config_).ok());
  EXPECT_EQ(rig_.store().LatestSequence(), sequence + 2) << "not the two records since the flush";
  EXPECT_EQ(rig_.engine().stats().dirty_lines, 64u + 1);
  std::vector<uint8_t> got(4096);
  ASSERT_TRUE(rig_.engine().Read(2 * 4096, got.data(), 4096).ok());
  EXPECT_EQ(got[0], 0x33);
}

// A cache flush that fails with no dirty line is forgiven the client, but
// the store is not told the flush completed: a dirty record the cleaner was
// replacing would be taken as stable over data the cache lost.
TEST_F(WarmStartTest, AFailedCacheFlushForgivenTheClientCompletesNoFlushInTheStore) {
  ASSERT_TRUE(rig_.engine().Flush().ok());
  ASSERT_EQ(rig_.engine().stats().dirty_lines, 0u);
  const uint64_t completed = rig_.store().GetCompletedFlush().value();
  rig_.cache().FailAlways(kFaultFlush);
  EXPECT_TRUE(rig_.engine().Sync().ok());
  EXPECT_EQ(rig_.store().GetCompletedFlush().value(), completed);
  rig_.cache().ClearFaults();
  ASSERT_TRUE(rig_.engine().Sync().ok());
  EXPECT_GT(rig_.store().GetCompletedFlush().value(), completed);
}

// Two records naming one origin line: the start refuses, and says which.
TEST_F(WarmStartTest, TwoRecordsOfOneLineAreRefused) {
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  LineRecord first;
  uint64_t first_slot = UINT64_MAX, other_slot = 0;
  ASSERT_TRUE(rig_.store().ForEachLine([&](uint64_t slot, const LineRecord& r) {
    if (first_slot == UINT64_MAX) {
      first_slot = slot;
      first = r;
    } else {
      other_slot = slot;
    }
    return Status::Ok();
  }).ok());
  MetadataStore::Batch batch;
  batch.PutLine(other_slot, first);
  ASSERT_TRUE(rig_.store().Apply(batch, true).ok());
  Status s = rig_.Open(config_);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("origin line " + std::to_string(first.origin_line) + " is recorded in two slots"),
            std::string::npos) << s.ToString();
}

// ---- format 1

// The fixtures name their files by absolute path (a file's identity is its
// path), so they are unpacked where they were made.
std::string FixtureRoot(int format) { return "/tmp/cachectl-v" + std::to_string(format) + "-fixture"; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Unpacks tests/fixtures/format_v<format>_<name>.tar.zst under FixtureRoot(format).
std::string Unpack(const std::string& name, int format = 1) {
  const std::string root = FixtureRoot(format);
  const std::string packed = ReadAll(std::string(CACHECTL_FIXTURES_DIR) + "/format_v" + std::to_string(format) +
                                     "_" + name + ".tar.zst");
  EXPECT_FALSE(packed.empty()) << "fixture " << name << " missing";
  const unsigned long long size = ZSTD_getFrameContentSize(packed.data(), packed.size());
  EXPECT_NE(size, ZSTD_CONTENTSIZE_ERROR);
  EXPECT_NE(size, ZSTD_CONTENTSIZE_UNKNOWN);
  std::string tar(size, '\0');
  EXPECT_EQ(ZSTD_decompress(tar.data(), tar.size(), packed.data(), packed.size()), size);
  const std::string dir = root + "/" + name;
  const std::string tar_path = root + "/" + name + ".tar";
  EXPECT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + root).c_str()), 0);
  std::ofstream(tar_path, std::ios::binary) << tar;
  EXPECT_EQ(std::system(("tar -x -C " + root + " -f " + tar_path).c_str()), 0);
  return dir;
}

struct Files {
  std::unique_ptr<BlockDevice> origin, cache;
  std::unique_ptr<MetadataStore> store;
  EngineDevices devices() { return {origin.get(), cache.get(), store.get()}; }
};

Files OpenFiles(const std::string& dir) {
  Files f;
  auto origin = OpenFileDevice(dir + "/origin.img", {});
  auto cache = OpenFileDevice(dir + "/cache.img", {});
  auto store = MetadataStore::Open(dir + "/meta", {});
  EXPECT_TRUE(origin.ok() && cache.ok() && store.ok());
  if (origin.ok()) f.origin = std::move(origin.value());
  if (cache.ok()) f.cache = std::move(cache.value());
  if (store.ok()) f.store = std::move(store.value());
  return f;
}

EngineConfig Config() {
  EngineConfig c;
  c.line_size = 4096;
  c.background_cleaner = false;
  c.sequential_cutoff = 0;
  return c;
}

// What make_format_v1.cc wrote, block by block (0: never written).
int Expected(uint64_t block) {
  if (block < 8) return 100 + static_cast<int>(block);
  if (block < 48) return static_cast<int>(block) + 1;
  return 0;
}

// `dropped`: a fresh block whose cache copy was damaged: the origin's (0).
void ExpectFixtureData(Engine& e, uint64_t dropped = UINT64_MAX) {
  AlignedBuffer b(4096);
  for (uint64_t block = 0; block < 64; ++block) {
    ASSERT_TRUE(e.Read(block * 4096, b.data(), 4096).ok()) << block;
    const auto* p = static_cast<const uint8_t*>(b.data());
    const int expected = block == dropped ? 0 : Expected(block);
    ASSERT_EQ(p[0], expected) << "block " << block;
    ASSERT_EQ(p[4095], expected) << "block " << block;
  }
}

void ExpectFormat(Files& f, uint32_t version) {
  Result<Superblock> sb = ReadSuperblock(f.cache.get());
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  EXPECT_EQ(sb->identity.format_version, version);
  EXPECT_EQ(f.store->GetIdentity()->format_version, version);
}

TEST(FormatUpgradeTest, AVersion1CacheShutDownWithDirtyDataIsUpgradedAndKeepsIt) {
  const std::string dir = Unpack("clean");
  {
    Files f = OpenFiles(dir);
    ExpectFormat(f, 1);
    auto e = Engine::Open(f.devices(), Config());
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ((*e)->identity().format_version, kFormatVersion);
    EXPECT_EQ((*e)->stats().dirty_lines, 48u);
    ExpectFixtureData(**e);
    ExpectFormat(f, kFormatVersion);
    ASSERT_TRUE((*e)->Shutdown().ok());
  }
  {  // warm again in the new format; then every dirty block reaches the origin
    Files f = OpenFiles(dir);
    auto e = Engine::Open(f.devices(), Config());
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ((*e)->stats().dirty_lines, 48u);
    ASSERT_TRUE((*e)->Flush().ok());
    ASSERT_TRUE((*e)->Shutdown().ok());
    AlignedBuffer b(4096);
    for (uint64_t block = 0; block < 64; ++block) {
      ASSERT_TRUE(f.origin->Read(block * 4096, b.data(), 4096).ok());
      ASSERT_EQ(static_cast<const uint8_t*>(b.data())[0], Expected(block)) << "origin block " << block;
    }
  }
}

// Format 2 (make_format_v2.cc, the same workload), shut down cleanly and
// cut by a crash after a flush: every later format must open both warm,
// dirty data and all, and move their blocks to the origin at a flush.
class Format2Test : public ::testing::TestWithParam<const char*> {};

TEST_P(Format2Test, AVersion2CacheOpensWarmWithItsDirtyData) {
  const std::string dir = Unpack(GetParam(), 2);
  {
    Files f = OpenFiles(dir);
    ExpectFormat(f, 2);
    auto e = Engine::Open(f.devices(), Config());
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ((*e)->identity().format_version, kFormatVersion);
    EXPECT_EQ((*e)->stats().dirty_lines, 48u);
    ExpectFixtureData(**e);
    ExpectFormat(f, kFormatVersion);
    // Format 3: the cache is its one volume, at 0, all its lines its own.
    std::vector<VolumeInfo> volumes = (*e)->volumes();
    ASSERT_EQ(volumes.size(), 1u);
    EXPECT_EQ(volumes[0].base, 0u);
    EXPECT_EQ(volumes[0].size, f.origin->size_bytes());
    EXPECT_EQ(volumes[0].dirty_lines, 48u);
    ASSERT_TRUE((*e)->Flush().ok());
    ASSERT_TRUE((*e)->Shutdown().ok());
  }
  Files f = OpenFiles(dir);
  AlignedBuffer b(4096);
  for (uint64_t block = 0; block < 64; ++block) {
    ASSERT_TRUE(f.origin->Read(block * 4096, b.data(), 4096).ok());
    ASSERT_EQ(static_cast<const uint8_t*>(b.data())[0], Expected(block)) << "origin block " << block;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Format2Test, ::testing::Values("clean", "crash"),
                         [](const auto& info) { return std::string(info.param); });

TEST_F(WarmStartTest, ANewerFormatIsRefusedAndNothingIsWritten) {
  ASSERT_TRUE(rig_.engine().Shutdown().ok());
  rig_.DropEngine();
  Result<Superblock> sb = ReadSuperblock(&rig_.raw_cache());
  ASSERT_TRUE(sb.ok());
  sb->identity.format_version = kFormatVersion + 1;  // a later cachectl's, checksum and all
  AlignedBuffer page(kSuperblockSize);
  EncodeSuperblock(*sb, static_cast<uint8_t*>(page.data()));
  ASSERT_TRUE(rig_.raw_cache().Write(0, page.data(), kSuperblockSize).ok());
  const uint64_t bytes = rig_.raw_cache().size_bytes();
  AlignedBuffer before(bytes), after(bytes);
  ASSERT_TRUE(rig_.raw_cache().Read(0, before.data(), bytes).ok());
  const uint64_t sequence = rig_.store().LatestSequence();
  Status s = rig_.Open(config_);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.ToString();
  EXPECT_NE(s.message().find("newer than this cachectl knows"), std::string::npos) << s.ToString();
  ASSERT_TRUE(rig_.raw_cache().Read(0, after.data(), bytes).ok());
  EXPECT_EQ(std::memcmp(before.data(), after.data(), bytes), 0) << "the cache device changed";
  EXPECT_EQ(rig_.store().LatestSequence(), sequence);
}

// A crash in the middle of the upgrade (its records rewritten, the
// versions not yet changed) leaves a cache the next start upgrades, data
// and all. The first start runs in a child process that dies at the step.
// One fresh block's cache copy is damaged first: the load drops it and
// frees its slot, and the upgrade deletes its format-1 record (kept, a
// later start after a clean shutdown took it as recorded: EIO).
TEST(FormatUpgradeTest, AnUpgradeCutShortByACrashIsFinishedAtTheNextStart) {
  const std::string dir = Unpack("crash");
  constexpr uint64_t kDamaged = 40;  // dirty fresh, in slot 40 (slots fill in order)
  {
    std::fstream cache(dir + "/cache.img", std::ios::in | std::ios::out | std::ios::binary);
    cache.seekp(static_cast<std::streamoff>(kDataOffset + kDamaged * 4096));
    const std::string junk(4096, '\xee');
    cache.write(junk.data(), junk.size());
  }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SetStepObserver([](const char* step) {
      if (std::strcmp(step, "upgrade-2-records-rewritten") == 0) _exit(42);
    });
    Files f = OpenFiles(dir);
    auto e = Engine::Open(f.devices(), Config());
    _exit(e.ok() ? 0 : 1);  // not reached when the step is
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 42) << "the upgrade did not reach its step";
  {
    Files f = OpenFiles(dir);
    ExpectFormat(f, 1);
    auto e = Engine::Open(f.devices(), Config());
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    // Nothing read: a miss would take the freed slot and replace its record.
    EXPECT_EQ((*e)->stats().dirty_lines, 47u);
    ExpectFormat(f, kFormatVersion);
    ASSERT_TRUE((*e)->Shutdown().ok());
  }
  Files f = OpenFiles(dir);  // after a clean shutdown: the dropped block stays dropped
  auto e = Engine::Open(f.devices(), Config());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)->stats().dirty_lines, 47u);
  ExpectFixtureData(**e, kDamaged);
  ASSERT_TRUE((*e)->Shutdown().ok());
}

}  // namespace
}  // namespace cachecore::testing
