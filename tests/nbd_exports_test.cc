// One NBD server, one export per volume of a cache: libnbd's client sees
// each volume at its own name and size, a write through one export lands
// on that volume's origin only, the list names them all, and removing an
// export ends its connections (their requests answered) while the other
// export's client goes on.
#include <gtest/gtest.h>
#include <libnbd.h>

#include <cstring>
#include <string>
#include <vector>

#include "shim/engine_backend.h"
#include "shim/nbd_server.h"
#include "support/engine_rig.h"

namespace cachecore::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class NbdExportsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RigOptions o;
    o.origin_size = 8 * kMiB;
    o.cache_data_size = 4 * kMiB;
    rig_ = std::make_unique<EngineRig>(o);
    EngineConfig c;
    c.mode = CacheMode::kWriteBack;
    ASSERT_TRUE(rig_->Create(c).ok());
    Result<VolumeInfo> v = rig_->engine().AddVolume("vol1", &rig_->AddOrigin("vol1", 4 * kMiB));
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    first_ = std::make_unique<shim::EngineBackend>(&rig_->engine());
    second_ = std::make_unique<shim::EngineBackend>(&rig_->engine(), v->base, v->size);
    shim::NbdServerOptions so;
    so.export_name = "vol0";
    so.unix_path = dir_.path() + "/nbd.sock";
    auto server = shim::NbdServer::Start(first_.get(), so);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server.value());
    ASSERT_TRUE(server_->AddExport("vol1", second_.get()).ok());
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  nbd_handle* Connect(const std::string& name) {
    nbd_handle* h = nbd_create();
    EXPECT_NE(h, nullptr);
    nbd_set_export_name(h, name.c_str());
    EXPECT_EQ(nbd_connect_unix(h, (dir_.path() + "/nbd.sock").c_str()), 0) << nbd_get_error();
    return h;
  }

  TempDir dir_;
  std::unique_ptr<EngineRig> rig_;
  std::unique_ptr<shim::EngineBackend> first_, second_;
  std::unique_ptr<shim::NbdServer> server_;
};

TEST_F(NbdExportsTest, EachExportIsItsVolume) {
  nbd_handle* a = Connect("vol0");
  nbd_handle* b = Connect("vol1");
  EXPECT_EQ(nbd_get_size(a), static_cast<int64_t>(8 * kMiB));
  EXPECT_EQ(nbd_get_size(b), static_cast<int64_t>(4 * kMiB));
  std::vector<char> ones(64 * 1024, 0x11), twos(64 * 1024, 0x22), back(64 * 1024);
  ASSERT_EQ(nbd_pwrite(a, ones.data(), ones.size(), 0, 0), 0) << nbd_get_error();
  ASSERT_EQ(nbd_pwrite(b, twos.data(), twos.size(), 0, 0), 0) << nbd_get_error();
  ASSERT_EQ(nbd_pread(a, back.data(), back.size(), 0, 0), 0);
  EXPECT_EQ(back, ones);
  ASSERT_EQ(nbd_pread(b, back.data(), back.size(), 0, 0), 0);
  EXPECT_EQ(back, twos);
  // Past vol1's end: refused by the server, nothing reaches the engine.
  EXPECT_NE(nbd_pread(b, back.data(), back.size(), 4 * kMiB, 0), 0);
  nbd_close(a);
  nbd_close(b);
  ASSERT_TRUE(rig_->engine().Flush().ok());
  AlignedBuffer got(64 * 1024);
  ASSERT_TRUE(rig_->extra_origin("vol1").Read(0, got.data(), got.size()).ok());
  EXPECT_EQ(std::memcmp(got.data(), twos.data(), twos.size()), 0);
  ASSERT_TRUE(rig_->raw_origin().Read(0, got.data(), got.size()).ok());
  EXPECT_EQ(std::memcmp(got.data(), ones.data(), ones.size()), 0);
}

TEST_F(NbdExportsTest, AnUnknownNameIsRefusedAndTheListNamesEveryExport) {
  nbd_handle* h = nbd_create();
  nbd_set_export_name(h, "nope");
  EXPECT_NE(nbd_connect_unix(h, (dir_.path() + "/nbd.sock").c_str()), 0);
  nbd_close(h);
  h = nbd_create();
  nbd_set_opt_mode(h, true);
  ASSERT_EQ(nbd_connect_unix(h, (dir_.path() + "/nbd.sock").c_str()), 0) << nbd_get_error();
  std::vector<std::string> names;
  nbd_list_callback collect = {
      [](void* user, const char* name, const char*) {
        static_cast<std::vector<std::string>*>(user)->push_back(name);
        return 0;
      },
      &names, nullptr};
  ASSERT_GE(nbd_opt_list(h, collect), 0) << nbd_get_error();
  EXPECT_EQ(names, (std::vector<std::string>{"vol0", "vol1"}));
  nbd_opt_abort(h);
  nbd_close(h);
}

TEST_F(NbdExportsTest, RemovingAnExportEndsItsClientsOnlyAndItCannotBeAskedForAgain) {
  nbd_handle* a = Connect("vol0");
  nbd_handle* b = Connect("vol1");
  std::vector<char> data(4096, 0x33);
  ASSERT_EQ(nbd_pwrite(b, data.data(), data.size(), 0, 0), 0);
  ASSERT_TRUE(server_->RemoveExport("vol1").ok());
  EXPECT_NE(nbd_pread(b, data.data(), data.size(), 0, 0), 0);  // its connection is gone
  EXPECT_EQ(nbd_pwrite(a, data.data(), data.size(), 0, 0), 0) << nbd_get_error();
  nbd_handle* again = nbd_create();
  nbd_set_export_name(again, "vol1");
  EXPECT_NE(nbd_connect_unix(again, (dir_.path() + "/nbd.sock").c_str()), 0);
  nbd_close(again);
  EXPECT_EQ(server_->RemoveExport("vol1").code(), StatusCode::kNotFound);
  EXPECT_EQ(server_->RemoveExport("vol0").code(), StatusCode::kNotFound);  // the default stays
  // With no client of its volume left, the engine removes it.
  EXPECT_TRUE(rig_->engine().RemoveVolume("vol1").ok());
  nbd_close(a);
  nbd_close(b);
}

}  // namespace
}  // namespace cachecore::testing
