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

Result<ControlReply> SendControl(const std::string& socket, const std::string& command,
                                 const std::function<void(uint64_t, uint64_t)>& on_progress) {
  Result<int> fd = shim::ConnectUnix(socket);
  if (!fd.ok()) return fd.status();
  std::string request = std::string(kProtocolTag) + " " + command + "\n";
  ControlReply reply;
  std::string line;
  bool finished = false;
  if (shim::WriteFull(fd.value(), request.data(), request.size())) {
    while (ReadLine(fd.value(), &line)) {
      if (line.rfind("progress ", 0) == 0) {
        unsigned long long left = 0, total = 0;
        if (std::sscanf(line.c_str(), "progress %llu %llu", &left, &total) == 2 && on_progress) {
          on_progress(left, total);
        }
      } else if (line.rfind("data ", 0) == 0) {
        reply.data.push_back(line.substr(5));
      } else if (line == "ok") {
        finished = true;
        break;
      } else if (line.rfind("error ", 0) == 0) {
        char* end = nullptr;
        reply.exit_code = static_cast<int>(std::strtol(line.c_str() + 6, &end, 10));
        reply.message = *end == ' ' ? std::string(end + 1) : std::string(end);
        if (reply.exit_code == 0) reply.exit_code = kExitIoFailure;
        finished = true;
        break;
      }
    }
  }
  close(fd.value());
  if (!finished) return Status::IoError("the daemon behind " + socket + " hung up mid-answer");
  return reply;
}

}  // namespace cachectl
