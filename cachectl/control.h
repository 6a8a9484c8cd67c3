// The control protocol between cachectl and a cache's daemon, version 1.
// One request per connection, a line: "cachectl/1 COMMAND [ARG...]".
// The daemon answers with lines:
//   "progress LEFT TOTAL"   (flush, detach, set --mode: dirty lines left)
//   "data KEY=VALUE"        (stats)
// and last "ok" or "error CODE MESSAGE", CODE being the exit code the CLI
// should return. The socket is 0600; state-changing commands also check
// the caller's credentials.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cachecore/status.h"

namespace cachectl {

constexpr char kProtocolTag[] = "cachectl/1";

// Exit codes, documented in docs/usage.md.
constexpr int kExitIoFailure = 1;
constexpr int kExitNotFound = 3;
constexpr int kExitRefused = 4;

struct ControlReply {
  int exit_code = 0;                // 0 when the daemon said "ok"
  std::string message;              // its error message otherwise
  std::vector<std::string> data;    // KEY=VALUE lines
  // The value of KEY among the data lines; empty when absent.
  std::string Value(const std::string& key) const;
};

// Sends `command` to the daemon behind `socket`. Progress lines go to
// `on_progress` as they arrive. kNotFound when no daemon answers there.
cachecore::Result<ControlReply> SendControl(
    const std::string& socket, const std::string& command,
    const std::function<void(uint64_t left, uint64_t total)>& on_progress = {});

// One line of a daemon's answer, parsed.
struct ReplyLine {
  enum Kind { kProgress, kData, kOk, kError, kOther } kind = kOther;
  uint64_t left = 0, total = 0;  // kProgress
  std::string text;              // kData: KEY=VALUE; kError: the message
  int exit_code = 0;             // kError (never 0)
};
ReplyLine ParseReplyLine(const std::string& line);

// The command of a request line "cachectl/1 COMMAND ..."; kInvalidArgument
// (with the protocol this side speaks) for anything else.
cachecore::Result<std::string> ParseRequestLine(const std::string& line);

// Reads one '\n'-terminated line (without it); false at EOF or error.
bool ReadLine(int fd, std::string* line);

// The exit code for a Status from the engine or the system.
int ExitCodeOf(const cachecore::Status& status);

}  // namespace cachectl
