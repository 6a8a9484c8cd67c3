#include "control.h"

#include <unistd.h>

#include <cstdlib>

#include "shim/socket_io.h"

namespace cachectl {

using cachecore::Result;
using cachecore::Status;
using cachecore::StatusCode;

bool ReadLine(int fd, std::string* line) {
  line->clear();
  char c;
  while (shim::ReadFull(fd, &c, 1)) {
    if (c == '\n') return true;
    if (line->size() > 65536) return false;
    *line += c;
  }
  return false;
}

int ExitCodeOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kNotFound: return kExitNotFound;
    case StatusCode::kBusy:
    case StatusCode::kMismatch:
    case StatusCode::kCorruption: return kExitRefused;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return 2;
    default: return kExitIoFailure;
  }
}

std::string ControlReply::Value(const std::string& key) const {
  for (const std::string& kv : data) {
    if (kv.size() > key.size() && kv.compare(0, key.size(), key) == 0 && kv[key.size()] == '=') {
      return kv.substr(key.size() + 1);
    }
  }
  return "";
}

ReplyLine ParseReplyLine(const std::string& line) {
  ReplyLine r;
  if (line.rfind("progress ", 0) == 0) {
    unsigned long long left = 0, total = 0;
    if (std::sscanf(line.c_str(), "progress %llu %llu", &left, &total) == 2) {
      r.kind = ReplyLine::kProgress;
      r.left = left;
      r.total = total;
    }
  } else if (line.rfind("data ", 0) == 0) {
    r.kind = ReplyLine::kData;
    r.text = line.substr(5);
  } else if (line == "ok") {
    r.kind = ReplyLine::kOk;
  } else if (line.rfind("error ", 0) == 0) {
    r.kind = ReplyLine::kError;
    char* end = nullptr;
    long code = std::strtol(line.c_str() + 6, &end, 10);
    r.exit_code = code > 0 && code < 256 ? static_cast<int>(code) : kExitIoFailure;
    r.text = *end == ' ' ? std::string(end + 1) : std::string(end);
  }
  return r;
}

Result<std::string> ParseRequestLine(const std::string& line) {
  std::string prefix = std::string(kProtocolTag) + " ";
  if (line.rfind(prefix, 0) != 0) {
    return Status::InvalidArgument(std::string("unsupported protocol (this daemon speaks ") +
                                   kProtocolTag + ")");
  }
  return line.substr(prefix.size());
}

Result<ControlReply> SendControl(const std::string& socket, const std::string& command,
                                 const std::function<void(uint64_t, uint64_t)>& on_progress) {
  Result<int> fd = shim::ConnectUnix(socket);
  if (!fd.ok()) return fd.status();
  std::string request = std::string(kProtocolTag) + " " + command + "\n";
  ControlReply reply;
  std::string line;
  bool finished = false;
  if (shim::WriteFull(fd.value(), request.data(), request.size())) {
    while (!finished && ReadLine(fd.value(), &line)) {
      ReplyLine r = ParseReplyLine(line);
      switch (r.kind) {
        case ReplyLine::kProgress:
          if (on_progress) on_progress(r.left, r.total);
          break;
        case ReplyLine::kData: reply.data.push_back(r.text); break;
        case ReplyLine::kOk: finished = true; break;
        case ReplyLine::kError:
          reply.exit_code = r.exit_code;
          reply.message = r.text;
          finished = true;
          break;
        case ReplyLine::kOther: break;  // a newer daemon's line: skip it
      }
    }
  }
  close(fd.value());
  if (!finished) return Status::IoError("the daemon behind " + socket + " hung up mid-answer");
  return reply;
}

}  // namespace cachectl
