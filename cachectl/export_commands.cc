// cachectl export / unexport: the cached volume as an NVMe/TCP namespace of
// the kernel's own target (nvme_export.h). The export is recorded in the
// cache's state directory (export.conf) so that detach and stop know of it
// and start serves it again after a reboot; the kernel's configuration is
// what says whether it is served now.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <optional>

#include "cli_common.h"
#include "commands.h"
#include "export_commands.h"
#include "nvme_export.h"

namespace cachectl {

namespace po = boost::program_options;
using cachecore::Result;
using cachecore::Status;

namespace {

std::string ExportFile(const Dirs& dirs, const std::string& name) { return dirs.StateDir(name) + "/export.conf"; }

// The recorded export; nullopt when there is none. A record that cannot
// be read is an error (it would otherwise let detach pull the device from
// under connected hosts).
Result<std::optional<NvmeExport>> LoadExport(const Dirs& dirs, const std::string& name) {
  if (access(ExportFile(dirs, name).c_str(), F_OK) != 0) return std::optional<NvmeExport>();
  Result<CacheConfig> config = LoadConfig(ExportFile(dirs, name));
  if (!config.ok()) return config.status();
  Result<NvmeExport> e = ExportFromConfig(config.value());
  if (!e.ok()) return Status::Corruption(ExportFile(dirs, name) + ": " + e.status().message());
  return std::optional<NvmeExport>(e.value());
}

struct ExportFlags {
  std::string address, nqn;
  std::vector<std::string> hosts;
  bool any_host = false;
};

Result<NvmeExport> ToExport(const ExportFlags& f, const std::string& name) {
  NvmeExport e;
  if (f.address.empty()) return Status::InvalidArgument("--nvme-tcp ADDR:PORT is required");
  if (Status s = ParseNvmeAddress(f.address, &e); !s.ok()) return Status::InvalidArgument("--nvme-tcp " + s.message());
  e.nqn = f.nqn.empty() ? DefaultNqn(name) : f.nqn;
  if (Status s = CheckNqn(e.nqn); !s.ok()) return Status::InvalidArgument("--nqn: " + s.message());
  if (f.any_host == !f.hosts.empty()) {
    return Status::InvalidArgument(f.any_host ? "--allow-any-host and --allow-host exclude each other"
                                              : "say who may connect: --allow-host HOSTNQN (again for more hosts) "
                                                "or --allow-any-host");
  }
  for (const std::string& h : f.hosts) {
    if (Status s = CheckNqn(h); !s.ok()) return Status::InvalidArgument("--allow-host: " + s.message());
  }
  e.allowed_hosts = f.hosts;
  e.allow_any_host = f.any_host;
  return e;
}

}  // namespace

int RunExport(const std::vector<std::string>& args) {
  std::string name;
  ExportFlags f;
  CommonOptions common;
  po::options_description desc = common.Describe(
      "cachectl export NAME --nvme-tcp ADDR:PORT [--nqn NQN] (--allow-host HOSTNQN... | --allow-any-host)\n\n"
      "Serves the cached volume (/dev/mapper/NAME) to other machines as an NVMe/TCP namespace of the\n"
      "kernel's own NVMe target (nvmet). Host NQNs are not secrets: use a network you trust.\n\n"
      "example: cachectl export data --nvme-tcp 192.0.2.10:4420 "
      "--allow-host nqn.2014-08.org.nvmexpress:uuid:5b3c...");
  desc.add_options()
      ("name", po::value(&name)->required(), "cache name")
      ("nvme-tcp", po::value(&f.address), "address and port to serve on (e.g. 192.0.2.10:4420, [fd00::1]:4420)")
      ("nqn", po::value(&f.nqn), "the subsystem's NQN (default nqn.2026-11.org.cachectl:NAME)")
      ("allow-host", po::value(&f.hosts), "a host NQN that may connect (repeat for more)")
      ("allow-any-host", po::bool_switch(&f.any_host), "let any host that reaches the port connect");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "export", "name"); rc >= 0) return rc;
  Result<NvmeExport> e = ToExport(f, name);
  if (!e.ok()) return Fail(kExitUsage, "export: " + e.status().message());
  if (int rc = common.RequireRoot("export"); rc != 0) return rc;
  Dirs dirs = common.dirs();
  if (access(dirs.ConfigFile(name).c_str(), F_OK) != 0) return Fail(kExitNotFound, "export: no cache named '" + name + "'");
  Result<std::optional<NvmeExport>> recorded = LoadExport(dirs, name);
  if (!recorded.ok()) return Fail(kExitFailed, "export: " + recorded.status().message());
  // A record not served (a start that could not serve it) is replaced.
  if (recorded.value() && NvmetTarget().Live(**recorded)) {
    return Fail(kExitRefused, "export: '" + name + "' is exported already (nvme-tcp " + (*recorded)->Address() +
                              " as " + (*recorded)->nqn + "): 'cachectl unexport " + name + "' first");
  }
  StatsReply stats = CurrentStats(dirs, name);
  if (stats.fields.empty()) return Fail(kExitNotFound, "export: cache '" + name + "' is not running");
  e->device = stats.Value("dm_device");
  if (e->device.empty()) {
    return Fail(kExitRefused, "export: '" + name + "' has no kernel device (/dev/mapper/" + name +
                              "), which the kernel's target serves: start it with --frontend ublk or nbd");
  }
  NvmetTarget target;
  if (Status s = target.Available(); !s.ok()) return Fail(kExitNotFound, "export: " + s.message());
  if (Status s = target.Create(&e.value()); !s.ok()) return Fail(kExitFailed, "export: " + s.message());
  if (Status s = SaveConfig(ExportFile(dirs, name), ExportToConfig(e.value())); !s.ok()) {
    (void)target.Remove(e.value());
    return Fail(kExitFailed, "export: " + s.message());
  }
  std::printf("exported %s: %s as NVMe/TCP namespace 1 of %s on %s (hosts: %s)\n", name.c_str(), e->device.c_str(),
              e->nqn.c_str(), e->Address().c_str(), e->HostsText().c_str());
  std::printf("  on another machine: nvme connect -t tcp -a %s -s %s -n %s\n", e->traddr.c_str(), e->trsvcid.c_str(),
              e->nqn.c_str());
  return 0;
}

namespace {

// Takes the export down and forgets it.
Status Unexport(const Dirs& dirs, const std::string& name, const NvmeExport& e) {
  NvmetTarget target;
  if (target.Available().ok()) {
    if (Status s = target.Remove(e); !s.ok()) return s;
  }
  if (unlink(ExportFile(dirs, name).c_str()) != 0 && errno != ENOENT) {
    return Status::IoError("cannot remove " + ExportFile(dirs, name));
  }
  return Status::Ok();
}

}  // namespace

int RunUnexport(const std::vector<std::string>& args) {
  std::string name;
  CommonOptions common;
  po::options_description desc = common.Describe(
      "cachectl unexport NAME\n\nStops serving the cached volume over NVMe/TCP: connected hosts lose the "
      "namespace.\n\nexample: cachectl unexport data");
  desc.add_options()("name", po::value(&name)->required(), "cache name");
  po::variables_map vm;
  if (int rc = common.Parse(desc, args, vm, "unexport", "name"); rc >= 0) return rc;
  if (int rc = common.RequireRoot("unexport"); rc != 0) return rc;
  Dirs dirs = common.dirs();
  if (access(dirs.ConfigFile(name).c_str(), F_OK) != 0) return Fail(kExitNotFound, "unexport: no cache named '" + name + "'");
  Result<std::optional<NvmeExport>> recorded = LoadExport(dirs, name);
  if (!recorded.ok()) return Fail(kExitFailed, "unexport: " + recorded.status().message());
  if (!recorded.value()) return Fail(kExitNotFound, "unexport: '" + name + "' is not exported");
  if (Status s = Unexport(dirs, name, **recorded); !s.ok()) return Fail(kExitFailed, "unexport: " + s.message());
  std::printf("unexported %s (%s)\n", name.c_str(), (*recorded)->nqn.c_str());
  return 0;
}


int ReleaseExport(const Dirs& dirs, const std::string& name, const std::string& verb, bool force, bool forget) {
  Result<std::optional<NvmeExport>> recorded = LoadExport(dirs, name);
  if (!recorded.ok()) return Fail(kExitFailed, verb + ": " + recorded.status().message());
  if (!recorded.value()) return 0;
  const NvmeExport& e = **recorded;
  NvmetTarget target;
  const bool live = target.Live(e);
  if (live && !force) {
    return Fail(kExitRefused, verb + ": '" + name + "' is exported over NVMe/TCP (" + e.Address() + " as " + e.nqn +
                              "): 'cachectl unexport " + name + "' first, or --force to unexport and " + verb);
  }
  Status s = !forget ? (live ? target.Remove(e) : Status::Ok()) : Unexport(dirs, name, e);
  if (!s.ok()) return Fail(kExitFailed, verb + ": unexporting: " + s.message());
  if (live) {
    std::printf("unexported %s (%s)%s\n", name.c_str(), e.nqn.c_str(), forget ? "" : "; the next start serves it again");
  }
  return 0;
}

void RestoreExport(const Dirs& dirs, const std::string& name) {
  Result<std::optional<NvmeExport>> recorded = LoadExport(dirs, name);
  Status s = recorded.status();
  if (s.ok() && !recorded.value()) return;
  NvmeExport e = s.ok() ? **recorded : NvmeExport{};
  NvmetTarget target;
  if (s.ok() && target.Live(e)) return;
  if (s.ok()) {
    e.device = CurrentStats(dirs, name).Value("dm_device");
    e.made_hosts.clear();
    s = e.device.empty() ? Status::NotFound("it has no kernel device now") : target.Available();
  }
  if (s.ok()) s = target.Create(&e);
  if (s.ok()) {
    s = SaveConfig(ExportFile(dirs, name), ExportToConfig(e));
    if (!s.ok()) (void)target.Remove(e);  // served but not recorded would outlive a detach
  }
  if (!s.ok()) {
    std::fprintf(stderr, "cachectl: warning: %s runs, but its NVMe/TCP export is not served: %s; "
                         "'cachectl export %s ...' serves it again, 'cachectl unexport %s' forgets it\n",
                 name.c_str(), s.message().c_str(), name.c_str(), name.c_str());
    return;
  }
  std::printf("  exported again: nvme-tcp %s as %s\n", e.Address().c_str(), e.nqn.c_str());
}

void AddExportFields(const Dirs& dirs, const std::string& name, Fields* fields) {
  Result<std::optional<NvmeExport>> recorded = LoadExport(dirs, name);
  if (!recorded.ok() || !recorded.value()) return;
  const NvmeExport& e = **recorded;
  fields->push_back({"nvme_export.address", e.Address()});
  fields->push_back({"nvme_export.nqn", e.nqn});
  fields->push_back({"nvme_export.hosts", e.HostsText()});
  fields->push_back({"nvme_export.live", NvmetTarget().Live(e) ? "true" : "false"});
}

}  // namespace cachectl
