// What cachectl export accepts before it touches the kernel's target: the
// address, the NQNs, and the record detach, stop and start read back.
// The target itself is exercised by the guest test (guest/nvme_export_test.sh).
#include "nvme_export.h"

#include <gtest/gtest.h>

namespace cachectl {
namespace {

TEST(NvmeExportTest, AddressesAreNumericWithAPort) {
  NvmeExport e;
  ASSERT_TRUE(ParseNvmeAddress("192.0.2.10:4420", &e).ok());
  EXPECT_EQ(e.traddr, "192.0.2.10");
  EXPECT_EQ(e.trsvcid, "4420");
  EXPECT_FALSE(e.ipv6);
  ASSERT_TRUE(ParseNvmeAddress("[fd00::1]:4421", &e).ok());
  EXPECT_EQ(e.traddr, "fd00::1");
  EXPECT_TRUE(e.ipv6);
  EXPECT_EQ(e.Address(), "[fd00::1]:4421");
  for (const char* bad : {"localhost:4420", "192.0.2.10", "192.0.2.10:0", "192.0.2.10:65536", "192.0.2.10:44x",
                          "fd00::1:4420", "[fd00::1]4420", ":4420", "300.1.1.1:4420"}) {
    EXPECT_FALSE(ParseNvmeAddress(bad, &e).ok()) << bad;
  }
}

TEST(NvmeExportTest, NqnsTheKernelTakes) {
  EXPECT_TRUE(CheckNqn("nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555").ok());
  EXPECT_TRUE(CheckNqn(DefaultNqn("data")).ok());
  EXPECT_TRUE(CheckNqn("nqn." + std::string(218, 'a')).ok());   // 222 bytes
  EXPECT_FALSE(CheckNqn("nqn." + std::string(219, 'a')).ok());  // 223
  for (const char* bad : {"", "nqn.", "iqn.2026-11.org.example:x", "nqn.2026-11.org.example:a b",
                          "nqn.2026-11.org.example:a/b", "nqn.2026-11.org.example:a,b",
                          "nqn.2014-08.org.nvmexpress.discovery"}) {
    EXPECT_FALSE(CheckNqn(bad).ok()) << bad;
  }
}

TEST(NvmeExportTest, TheRecordReadsBackAsWritten) {
  NvmeExport e;
  ASSERT_TRUE(ParseNvmeAddress("[fd00::1]:4420", &e).ok());
  e.nqn = DefaultNqn("data");
  e.allowed_hosts = {"nqn.2014-08.org.nvmexpress:uuid:1", "nqn.2014-08.org.nvmexpress:uuid:2"};
  e.made_hosts = {"nqn.2014-08.org.nvmexpress:uuid:2"};
  e.device = "/dev/mapper/data";
  e.port_id = 3;
  auto back = ExportFromConfig(ExportToConfig(e));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->Address(), e.Address());
  EXPECT_EQ(back->nqn, e.nqn);
  EXPECT_EQ(back->allowed_hosts, e.allowed_hosts);
  EXPECT_EQ(back->made_hosts, e.made_hosts);  // only these go with the export
  EXPECT_FALSE(back->allow_any_host);
  EXPECT_EQ(back->device, e.device);
  EXPECT_EQ(back->port_id, 3u);
  EXPECT_EQ(back->HostsText(), "nqn.2014-08.org.nvmexpress:uuid:1 nqn.2014-08.org.nvmexpress:uuid:2");
  e.allowed_hosts.clear();
  e.allow_any_host = true;
  back = ExportFromConfig(ExportToConfig(e));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->allow_any_host);
  EXPECT_EQ(back->HostsText(), "any host");
  // A damaged record is an error, not "not exported".
  auto config = ExportToConfig(e);
  config["nqn"] = "garbage";
  EXPECT_FALSE(ExportFromConfig(config).ok());
}

// Without the target (this machine's kernel, a container), the error names
// the module to load.
TEST(NvmeExportTest, AMissingTargetNamesTheModule) {
  NvmetTarget target("/nonexistent/nvmet");
  cachecore::Status s = target.Available();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("nvmet"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace cachectl
