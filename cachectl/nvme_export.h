// An NVMe over TCP export of a cached volume by the kernel's own NVMe target
// (nvmet), configured through configfs: a subsystem named by its NQN with
// one namespace on the volume's kernel device (/dev/mapper/NAME), the hosts
// allowed to connect, and a TCP port the subsystem is linked to. No target
// code of ours: the kernel serves the I/O, cachectl only writes the
// configuration and takes it down.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cachecore/base/status.h"

namespace cachectl {

struct NvmeExport {
  std::string traddr;  // an IPv4 or IPv6 address, without brackets
  std::string trsvcid;  // the TCP port, as digits
  bool ipv6 = false;
  std::string nqn;  // the subsystem's NQN
  std::vector<std::string> allowed_hosts;  // host NQNs; empty with allow_any_host
  bool allow_any_host = false;
  std::string device;  // the namespace's block device
  unsigned port_id = 0;  // the nvmet port it is linked to (set by Create)
  // Host entries Create made (the others were there before, perhaps with
  // keys of their own): only these are removed with the export.
  std::vector<std::string> made_hosts;

  std::string Address() const { return ipv6 ? "[" + traddr + "]:" + trsvcid : traddr + ":" + trsvcid; }
  std::string HostsText() const;
};

// An NQN as the NVMe specification has it: "nqn." then a date and a
// reversed domain, at most 222 bytes of printable ASCII without spaces,
// '/' (it names a configfs directory) or ',' (the host's kernel splits its
// options on it); not the discovery NQN. InvalidArgument saying what is wrong.
cachecore::Status CheckNqn(const std::string& nqn);

// The subsystem NQN of a cache that was not given one.
std::string DefaultNqn(const std::string& cache_name);

// "ADDR:PORT" with a numeric IPv4 address or a bracketed IPv6 one
// ("[fd00::1]:4420"), port 1-65535, into `e`. InvalidArgument otherwise.
cachecore::Status ParseNvmeAddress(const std::string& text, NvmeExport* e);

// The export as key=value pairs (the cache's export.conf) and back.
std::map<std::string, std::string> ExportToConfig(const NvmeExport& e);
cachecore::Result<NvmeExport> ExportFromConfig(const std::map<std::string, std::string>& config);

// The kernel's NVMe target under `root` (its configfs directory).
class NvmetTarget {
 public:
  static constexpr const char* kDefaultRoot = "/sys/kernel/config/nvmet";
  explicit NvmetTarget(std::string root = kDefaultRoot) : root_(std::move(root)) {}

  // Ok when the target can be configured; loads nvmet-tcp when its
  // configfs directory is missing. NotFound naming the module otherwise.
  cachecore::Status Available() const;
  // Creates the export whole: subsystem, allowed hosts, namespace, port
  // (an existing port on the same address is shared), the link that
  // starts serving. Sets e->port_id. On failure takes down what it made
  // and says which step failed and why (a port in use, a device busy).
  cachecore::Status Create(NvmeExport* e) const;
  // Takes the export down: connected hosts lose the namespace. Parts
  // already gone are skipped; a port is removed only when it is the
  // export's (its address) and serves nothing else, a host entry only
  // when Create made it and no other subsystem allows it.
  cachecore::Status Remove(const NvmeExport& e) const;
  // Whether the export is being served now (its port link exists).
  bool Live(const NvmeExport& e) const;

 private:
  std::string Subsystem(const NvmeExport& e) const { return root_ + "/subsystems/" + e.nqn; }
  std::string Port(unsigned id) const { return root_ + "/ports/" + std::to_string(id); }
  cachecore::Result<unsigned> FindOrMakePort(const NvmeExport& e, bool* made) const;
  bool PortServes(unsigned id, const NvmeExport& e) const;  // tcp on e's address
  cachecore::Status AllowHosts(NvmeExport* e) const;  // adds to e->made_hosts
  cachecore::Status AddNamespace(const NvmeExport& e) const;

  std::string root_;
};

}  // namespace cachectl
