#include "control.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "shim/socket_io.h"

namespace cachectl {

using cachecore::Result;
using cachecore::Status;

bool ReadLine(int fd, std::string* line) {
  line->clear();
  char c;
  while (shim::ReadFull(fd, &c, 1)) {
    if (c == '\n') return true;
    if (line->size() >= kMaxLineBytes) return false;
    *line += c;
  }
  return false;
}

bool ReadLineBefore(int fd, std::string* line, std::chrono::steady_clock::time_point deadline) {
  line->clear();
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    line->append(buffer, static_cast<size_t>(n));
    if (size_t end = line->find('\n'); end != std::string::npos) {
      line->resize(end);  // one request a connection: what follows it is not read
      return line->size() <= kMaxLineBytes;
    }
    if (line->size() > kMaxLineBytes) return false;
  }
}

Result<ControlReply> ReadAnswer(int fd, const ProgressSink& on_progress) {
  ControlReply reply;
  std::string line;
  while (ReadLine(fd, &line)) {
    Result<ReplyLine> r = DecodeReplyLine(line);
    if (!r.ok()) return Status::IoError("sent a malformed answer: " + r.status().message());
    switch (r->kind) {
      case ReplyLine::kProgress:
        if (on_progress) on_progress(r->left, r->total);
        break;
      case ReplyLine::kData:
        if (reply.data.size() >= kMaxReplyLines) return Status::IoError("sent an answer of too many lines");
        reply.data.emplace_back(std::move(r->key), std::move(r->value));
        break;
      case ReplyLine::kOk: return reply;
      case ReplyLine::kError:
        reply.exit_code = r->exit_code;
        reply.message = std::move(r->message);
        return reply;
    }
  }
  return Status::IoError("hung up mid-answer");
}

Result<ControlReply> SendControl(const std::string& socket, const Request& request,
                                 const ProgressSink& on_progress) {
  Result<int> fd = shim::ConnectUnix(socket);
  if (!fd.ok()) return fd.status();
  const std::string line = EncodeRequest(request);
  const bool sent = shim::WriteFull(fd.value(), line.data(), line.size());
  // A daemon that refuses the connection (too many at once) answers and
  // hangs up without reading: its answer is still there to read.
  Result<ControlReply> reply = ReadAnswer(fd.value(), on_progress);
  if (!reply.ok() && !sent) reply = Status::IoError("hung up before the request");
  close(fd.value());
  if (!reply.ok()) return Status::IoError("the daemon behind " + socket + " " + reply.status().message());
  return reply;
}

}  // namespace cachectl
