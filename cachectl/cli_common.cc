#include "cli_common.h"

#include <grp.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cache_checks.h"
#include "cachecore/engine/engine.h"
#include "commands.h"
#include "control.h"

namespace cachectl {

namespace po = boost::program_options;

cachecore::Status CheckRamCacheFits(uint64_t bytes) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const uint64_t memory = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
  if (memory == 0 || bytes <= memory / 4 * 3) return cachecore::Status::Ok();
  return cachecore::Status::InvalidArgument("a RAM tier of " + HumanBytes(bytes) + " is more than three quarters of this host's " +
                                            HumanBytes(memory) + " of memory");
}

cachecore::Result<uint64_t> ParseRamCache(const std::string& text) {
  if (text == "off") return uint64_t{0};
  cachecore::Result<uint64_t> bytes = cachecore::ParseSize(text);
  if (!bytes.ok()) return cachecore::Status::InvalidArgument("--ram-cache '" + text + "': a size such as 512M or 4G, or off");
  for (const cachecore::Status& s : {cachecore::Engine::CheckRamCache(bytes.value()), CheckRamCacheFits(bytes.value())}) {
    if (!s.ok()) return cachecore::Status::InvalidArgument("--ram-cache " + text + ": " + s.message());
  }
  return bytes.value();
}

int AskCache(const Dirs& dirs, const std::string& name, const std::string& verb, const Request& request,
             ControlReply* reply, const ProgressSink& progress) {
  // EACCES: root's cache, perhaps open to the caller's group: its daemon decides.
  if (access(dirs.ConfigFile(name).c_str(), F_OK) != 0 && errno != EACCES) {
    return Fail(kExitNotFound, verb + ": no cache named '" + name + "'");
  }
  cachecore::Result<ControlReply> r = SendControl(dirs.ControlSocket(name), request, progress);
  if (!r.ok()) return Fail(kExitNotFound, verb + ": cache '" + name + "' is not running");
  if (r->exit_code != 0) return Fail(r->exit_code, verb + ": " + r->message);
  *reply = std::move(r.value());
  return 0;
}

StatsReply CurrentStats(const Dirs& dirs, const std::string& name) {
  cachecore::Result<ControlReply> answer = SendControl(dirs.ControlSocket(name), StatsRequest{});
  if (!answer.ok() || answer->exit_code != kExitOk) return StatsReply{};
  cachecore::Result<StatsReply> stats = DecodeStatsReply(answer->data);
  return stats.ok() ? stats.value() : StatsReply{};
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

po::options_description CommonOptions::Describe(const std::string& usage) {
  po::options_description desc(usage + "\n\noptions");
  desc.add_options()
      ("help,h", "show this help")
      ("run-dir", po::value(&run_dir_), "runtime directory (default /run/cachectl, or $CACHECTL_RUN_DIR)")
      ("state-dir", po::value(&state_dir_), "state directory (default /var/lib/cachectl, or $CACHECTL_STATE_DIR)");
  return desc;
}

int CommonOptions::Parse(const po::options_description& desc, const std::vector<std::string>& args,
                         po::variables_map& vm, const std::string& verb, const char* positional) {
  try {
    po::positional_options_description pos;
    if (positional) pos.add(positional, 1);
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << desc;
      return kExitOk;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    return Fail(kExitUsage, verb + ": " + e.what() + " (see 'cachectl " + verb + " --help')");
  }
  // Every verb's cache name, before any path is built from it (a name
  // such as "../x" would reach outside the run and state directories).
  if (vm.count("name")) {
    if (cachecore::Status s = CheckName(vm["name"].as<std::string>()); !s.ok()) {
      return Fail(kExitUsage, verb + ": " + s.message());
    }
  }
  return -1;
}

int CommonOptions::RequireRoot(const std::string& verb) const {
  if (geteuid() == 0) return 0;
  Dirs d = dirs();
  if (access(d.state.c_str(), W_OK) == 0 && access(d.run.c_str(), W_OK) == 0) return 0;
  return Fail(kExitRefused, verb + ": permission denied: run as root (or give --run-dir and "
                            "--state-dir that you can write)");
}

cachecore::Result<int> ResolveGroup(const std::string& name) {
  if (name.empty()) return -1;
  group* g = getgrnam(name.c_str());
  if (!g && name.find_first_not_of("0123456789") == std::string::npos) g = getgrgid(std::stoul(name));
  if (!g) return cachecore::Status::InvalidArgument("no group named '" + name + "'");
  return static_cast<int>(g->gr_gid);
}

}  // namespace cachectl
