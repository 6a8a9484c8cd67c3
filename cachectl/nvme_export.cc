#include "nvme_export.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace cachectl {

using cachecore::Result;
using cachecore::Status;

namespace {

// The host's kernel takes NQNs shorter than 223 bytes (NVMF_NQN_SIZE with
// its terminating zero) and splits its connect options on ','.
constexpr size_t kMaxNqnLength = 222;

std::string Errno(int err) { return std::strerror(err); }

bool Exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

// configfs attributes take one write of the whole value; the kernel's
// answer to that write is the step's result.
Status WriteAttr(const std::string& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("cannot open " + path + ": " + Errno(errno));
  std::string line = value + "\n";
  ssize_t n = write(fd, line.data(), line.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(line.size())) {
    return Status::IoError("writing '" + value + "' to " + path + ": " + Errno(n < 0 ? err : EIO));
  }
  return Status::Ok();
}

std::string ReadAttr(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[512];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  std::string s(buf, n > 0 ? n : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0) return Status::Ok();
  return Status::IoError("cannot create " + path + ": " + Errno(errno));
}

Status Link(const std::string& target, const std::string& link) {
  if (symlink(target.c_str(), link.c_str()) == 0) return Status::Ok();
  return Status::IoError("cannot link " + link + " to " + target + ": " + Errno(errno));
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  return names;
}

}  // namespace

std::string NvmeExport::HostsText() const {
  if (allow_any_host) return "any host";
  std::string out;
  for (const std::string& h : allowed_hosts) out += (out.empty() ? "" : " ") + h;
  return out;
}

Status CheckNqn(const std::string& nqn) {
  if (nqn.size() > kMaxNqnLength) {
    return Status::InvalidArgument("NQN '" + nqn.substr(0, 40) + "...' is longer than 222 bytes");
  }
  if (nqn.rfind("nqn.", 0) != 0 || nqn.size() < 5) {
    return Status::InvalidArgument("'" + nqn + "' is not an NQN (nqn.YYYY-MM.reversed.domain:name)");
  }
  for (char c : nqn) {
    if (c <= ' ' || c > '~' || c == '/' || c == ',') {
      return Status::InvalidArgument("NQN '" + nqn + "': only printable ASCII without spaces, '/' or ','");
    }
  }
  if (nqn == "nqn.2014-08.org.nvmexpress.discovery") {
    return Status::InvalidArgument("'" + nqn + "' is the discovery service's NQN");
  }
  return Status::Ok();
}

std::string DefaultNqn(const std::string& cache_name) { return "nqn.2026-11.org.cachectl:" + cache_name; }

Status ParseNvmeAddress(const std::string& text, NvmeExport* e) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find("]:");
    if (close == std::string::npos) return Status::InvalidArgument("'" + text + "': [IPv6]:PORT expected");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos) return Status::InvalidArgument("'" + text + "': ADDR:PORT expected, e.g. 192.0.2.10:4420");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string::npos) {
      return Status::InvalidArgument("'" + text + "': an IPv6 address goes in brackets, e.g. [fd00::1]:4420");
    }
  }
  unsigned char buf[16];
  bool v4 = inet_pton(AF_INET, host.c_str(), buf) == 1;
  bool v6 = !v4 && inet_pton(AF_INET6, host.c_str(), buf) == 1;
  if (!v4 && !v6) {
    return Status::InvalidArgument("'" + host + "' is not a numeric IPv4 or IPv6 address (the kernel's target takes no names)");
  }
  char* end = nullptr;
  unsigned long p = port.empty() ? 0 : std::strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p == 0 || p > 65535) {
    return Status::InvalidArgument("'" + port + "' is not a TCP port (1-65535)");
  }
  e->traddr = host;
  e->trsvcid = std::to_string(p);
  e->ipv6 = v6;
  return Status::Ok();
}

std::map<std::string, std::string> ExportToConfig(const NvmeExport& e) {
  auto list = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& h : v) out += (out.empty() ? "" : ",") + h;
    return out;
  };
  return {{"nvme_tcp", e.Address()},   {"nqn", e.nqn},
          {"allowed_hosts", list(e.allowed_hosts)}, {"made_hosts", list(e.made_hosts)},
          {"allow_any_host", e.allow_any_host ? "1" : "0"},
          {"device", e.device},         {"port_id", std::to_string(e.port_id)}};
}

Result<NvmeExport> ExportFromConfig(const std::map<std::string, std::string>& config) {
  auto get = [&](const char* key) {
    auto it = config.find(key);
    return it == config.end() ? std::string() : it->second;
  };
  NvmeExport e;
  if (Status s = ParseNvmeAddress(get("nvme_tcp"), &e); !s.ok()) return s;
  e.nqn = get("nqn");
  if (Status s = CheckNqn(e.nqn); !s.ok()) return s;
  auto list = [](const std::string& text) {
    std::vector<std::string> out;
    std::stringstream in(text);
    for (std::string h; std::getline(in, h, ',');) {
      if (!h.empty()) out.push_back(h);
    }
    return out;
  };
  e.allowed_hosts = list(get("allowed_hosts"));
  e.made_hosts = list(get("made_hosts"));
  e.allow_any_host = get("allow_any_host") == "1";
  e.device = get("device");
  e.port_id = static_cast<unsigned>(std::strtoul(get("port_id").c_str(), nullptr, 10));
  return e;
}

Status NvmetTarget::Available() const {
  if (!Exists(root_) && root_ == kDefaultRoot) {
    // The configfs directory appears with the nvmet module; nvmet-tcp
    // brings it and the TCP transport. Quiet: the error below says more.
    (void)!std::system("modprobe -q nvmet-tcp >/dev/null 2>&1");
  }
  if (!Exists(root_)) {
    if (root_ == kDefaultRoot && !Exists("/sys/kernel/config")) {
      return Status::NotFound("configfs is not mounted at /sys/kernel/config, through which the kernel's NVMe "
                              "target (modules nvmet, nvmet-tcp) is configured: mount -t configfs none /sys/kernel/config");
    }
    return Status::NotFound("the kernel's NVMe target is not available (" + root_ +
                            " is missing): load the nvmet and nvmet-tcp modules (modprobe nvmet-tcp)");
  }
  return Status::Ok();
}

Result<unsigned> NvmetTarget::FindOrMakePort(const NvmeExport& e, bool* made) const {
  *made = false;
  unsigned highest = 0;
  for (const std::string& id : Entries(root_ + "/ports")) {
    const unsigned n = static_cast<unsigned>(std::strtoul(id.c_str(), nullptr, 10));
    highest = std::max(highest, n);
    if (PortServes(n, e)) return n;
  }
  unsigned id = highest + 1;
  std::string dir = Port(id);
  if (Status s = MakeDir(dir); !s.ok()) return s;
  *made = true;
  for (const auto& [attr, value] : {std::pair<const char*, std::string>{"addr_trtype", "tcp"},
                                    {"addr_adrfam", e.ipv6 ? "ipv6" : "ipv4"},
                                    {"addr_traddr", e.traddr},
                                    {"addr_trsvcid", e.trsvcid}}) {
    if (Status s = WriteAttr(dir + "/" + attr, value); !s.ok()) {
      rmdir(dir.c_str());
      return s;
    }
  }
  return id;
}

Status NvmetTarget::AllowHosts(NvmeExport* e) const {
  if (Status s = WriteAttr(Subsystem(*e) + "/attr_allow_any_host", e->allow_any_host ? "1" : "0"); !s.ok()) return s;
  for (const std::string& h : e->allowed_hosts) {
    std::string host = root_ + "/hosts/" + h;
    if (!Exists(host)) {
      if (Status s = MakeDir(host); !s.ok()) return s;
      e->made_hosts.push_back(h);
    }
    if (Status s = Link(host, Subsystem(*e) + "/allowed_hosts/" + h); !s.ok()) return s;
  }
  return Status::Ok();
}

Status NvmetTarget::AddNamespace(const NvmeExport& e) const {
  std::string ns = Subsystem(e) + "/namespaces/1";
  if (Status s = MakeDir(ns); !s.ok()) return s;
  if (Status s = WriteAttr(ns + "/device_path", e.device); !s.ok()) return s;
  Status enabled = WriteAttr(ns + "/enable", "1");
  if (!enabled.ok()) {
    return Status::IoError("the target cannot open " + e.device + " (" + enabled.message() + ")");
  }
  return Status::Ok();
}

Status NvmetTarget::Create(NvmeExport* e) const {
  if (Exists(Subsystem(*e))) {
    return Status::Busy("the kernel's NVMe target has a subsystem " + e->nqn + " already");
  }
  e->port_id = 0;  // a recorded id (a restore) is not known to be ours until FindOrMakePort says so
  if (Status s = MakeDir(Subsystem(*e)); !s.ok()) return s;
  Status s = AllowHosts(e);
  if (s.ok()) s = AddNamespace(*e);
  bool made_port = false;
  if (s.ok()) {
    Result<unsigned> port = FindOrMakePort(*e, &made_port);
    if (port.ok()) e->port_id = port.value();
    else s = port.status();
  }
  if (s.ok()) {
    s = Link(Subsystem(*e), Port(e->port_id) + "/subsystems/" + e->nqn);
    if (!s.ok()) {
      s = Status::IoError("the kernel cannot serve on " + e->Address() + " (" + s.message() +
                          "; is the address this machine's, and the port free?)");
    }
  }
  if (!s.ok()) {
    // Remove takes down a port it finds on our address with nothing else on
    // it: the one made here; a shared port stays as it was.
    NvmeExport partial = *e;
    if (!made_port) partial.port_id = 0;
    (void)Remove(partial);
  }
  return s;
}

Status NvmetTarget::Remove(const NvmeExport& e) const {
  Status first = Status::Ok();
  auto note = [&first](int rc, const std::string& what) {
    if (rc != 0 && errno != ENOENT && first.ok()) first = Status::IoError(what + ": " + Errno(errno));
  };
  // A port of another address (the id reused after a reboot) is not ours.
  if (e.port_id != 0 && PortServes(e.port_id, e)) {
    // Unlinking stops the service: the hosts' controllers go away.
    note(unlink((Port(e.port_id) + "/subsystems/" + e.nqn).c_str()), "unlinking the port");
    if (Entries(Port(e.port_id) + "/subsystems").empty()) {
      note(rmdir(Port(e.port_id).c_str()), "removing port " + std::to_string(e.port_id));
    }
  }
  std::string ns = Subsystem(e) + "/namespaces/1";
  if (Exists(ns)) {
    (void)WriteAttr(ns + "/enable", "0");
    note(rmdir(ns.c_str()), "removing the namespace");
  }
  for (const std::string& h : Entries(Subsystem(e) + "/allowed_hosts")) {
    note(unlink((Subsystem(e) + "/allowed_hosts/" + h).c_str()), "unlinking host " + h);
  }
  if (Exists(Subsystem(e))) note(rmdir(Subsystem(e).c_str()), "removing the subsystem");
  for (const std::string& h : e.made_hosts) {
    (void)rmdir((root_ + "/hosts/" + h).c_str());  // fails, rightly, while another subsystem allows it
  }
  return first;
}

bool NvmetTarget::PortServes(unsigned id, const NvmeExport& e) const {
  std::string dir = Port(id);
  return ReadAttr(dir + "/addr_trtype") == "tcp" && ReadAttr(dir + "/addr_traddr") == e.traddr &&
         ReadAttr(dir + "/addr_trsvcid") == e.trsvcid;
}

bool NvmetTarget::Live(const NvmeExport& e) const {
  return e.port_id != 0 && PortServes(e.port_id, e) && Exists(Port(e.port_id) + "/subsystems/" + e.nqn);
}

}  // namespace cachectl
