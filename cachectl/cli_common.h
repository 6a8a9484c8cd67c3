// Options every cache command shares (--help, --run-dir, --state-dir), and
// the parse that turns a wrong command line into one line and exit code 2.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "control.h"
#include "paths.h"
#include "stats_view.h"  // HumanBytes

namespace cachectl {

// The id of group `name` (a name or a number); -1 for an empty name.
// kInvalidArgument when there is no such group.
cachecore::Result<int> ResolveGroup(const std::string& name);

// --ram-cache's size: "off" or 0 (no RAM tier), or a size (4M, 2G) of at
// least 4 MiB and at most three quarters of this host's memory (the rest
// is the system's, the daemon's and RocksDB's). kInvalidArgument saying why.
cachecore::Result<uint64_t> ParseRamCache(const std::string& text);

// Sends `request` to the running cache NAME. 0 with its reply in `reply`
// when it answered "ok"; otherwise prints "VERB: why" and returns the exit
// code (no such cache, not running, or the daemon's refusal).
// `progress` gets the daemon's progress lines, if any.
int AskCache(const Dirs& dirs, const std::string& name, const std::string& verb, const Request& request,
             ControlReply* reply, const ProgressSink& progress = {});

// A reply decoded from a daemon's answer (a Decode* of protocol.h): 0 with
// it in `out`, or prints "VERB: ..." and returns kExitFailed.
// The running daemon's stats (empty when it does not answer).
StatsReply CurrentStats(const Dirs& dirs, const std::string& name);

template <typename T>
int TakeReply(const std::string& verb, cachecore::Result<T> decoded, T* out) {
  if (!decoded.ok()) return Fail(kExitFailed, verb + ": the daemon sent a malformed answer: " + decoded.status().message());
  *out = std::move(decoded.value());
  return 0;
}

// The text of a JSON string: quoted, with quotes and backslashes escaped.
std::string JsonString(const std::string& s);

class CommonOptions {
 public:
  // `usage` is printed by --help above the options.
  boost::program_options::options_description Describe(const std::string& usage);
  // Returns -1 to go on, or the exit code to return now (after --help or an
  // error). `positional` names the option a bare argument fills.
  int Parse(const boost::program_options::options_description& desc,
            const std::vector<std::string>& args, boost::program_options::variables_map& vm,
            const std::string& verb, const char* positional = nullptr);
  Dirs dirs() const { return ResolveDirs(run_dir_, state_dir_); }
  // 0 when the caller may manage caches in these directories, else prints
  // why and returns the refusal code.
  int RequireRoot(const std::string& verb) const;

 private:
  std::string run_dir_, state_dir_;
};

}  // namespace cachectl
