// The CLI's end of the control protocol (protocol.h): one request to a
// cache's daemon over its control socket (0600, or 0660 for the cache's
// group; the daemon checks a changing caller's credentials), and the
// answer. Also reads the daemon's start-up answer from its pipe.
#pragma once

#include <chrono>
#include <string>

#include "cachecore/base/status.h"
#include "protocol.h"

namespace cachectl {

// A complete answer: the daemon said "ok" (exit_code kExitOk) or "error".
struct ControlReply {
  ExitCode exit_code = kExitOk;
  std::string message;  // the error message, when exit_code is not kExitOk
  Fields data;          // the data lines, in order: decode them with protocol.h
};

// Sends `request` to the daemon behind `socket` and reads its answer;
// progress lines go to `on_progress` as they arrive. kNotFound when no
// daemon answers there; kIoError when it hangs up mid-answer or sends a
// malformed one. The daemon's refusals come back OK, in the reply.
cachecore::Result<ControlReply> SendControl(const std::string& socket, const Request& request,
                                            const ProgressSink& on_progress = {});

// Reads answer lines from `fd` until the "ok" or "error" line. kIoError
// when the stream ends first, or a line is malformed or over the limits
// (kMaxLineBytes, kMaxReplyLines).
cachecore::Result<ControlReply> ReadAnswer(int fd, const ProgressSink& on_progress = {});

// Reads one '\n'-terminated line (without it), at most kMaxLineBytes;
// false at EOF, on an error or past the limit.
bool ReadLine(int fd, std::string* line);
// ReadLine for a peer that may be hostile: the whole line must have come
// by `deadline`, however slowly its bytes trickle in; false otherwise.
bool ReadLineBefore(int fd, std::string* line, std::chrono::steady_clock::time_point deadline);

}  // namespace cachectl
