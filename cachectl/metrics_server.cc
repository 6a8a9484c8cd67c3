#include "metrics_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>

#include "shim/socket_io.h"

namespace cachectl {

using cachecore::Result;
using cachecore::Status;

namespace {

constexpr size_t kMaxRequest = 8 << 10;
constexpr auto kDeadline = std::chrono::seconds(5);

// The request's head (up to the blank line), whole within the deadline;
// empty when it did not come.
std::string ReadHead(int fd) {
  const auto end = std::chrono::steady_clock::now() + kDeadline;
  std::string head;
  char buf[1024];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < kMaxRequest) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "";
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return "";
    head.append(buf, static_cast<size_t>(n));
  }
  return head.find("\r\n\r\n") == std::string::npos ? "" : head;
}

std::string Response(const std::string& status, const std::string& type, const std::string& body, bool head_only) {
  return "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + (head_only ? "" : body);
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address,
                                                            std::function<std::string()> render) {
  Result<int> fd = shim::ListenTcp(address);
  if (!fd.ok()) return Status::InvalidArgument("--listen " + address + ": " + fd.status().message());
  std::unique_ptr<MetricsServer> server(new MetricsServer(fd.value(), std::move(render)));
  if (pipe2(server->wake_, O_CLOEXEC) != 0) return Status::IoError("pipe");
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

MetricsServer::MetricsServer(int listen_fd, std::function<std::string()> render)
    : listen_fd_(listen_fd), render_(std::move(render)) {}

MetricsServer::~MetricsServer() {
  Stop();
  close(listen_fd_);
  for (int fd : wake_) if (fd >= 0) close(fd);
}

void MetricsServer::Stop() {
  if (!thread_.joinable()) return;
  (void)!write(wake_[1], "x", 1);
  thread_.join();
}

void MetricsServer::Loop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;  // the revents are stale
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      // Out of descriptors: the connection stays queued and poll says so
      // at once; wait a little rather than spin.
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    Serve(client);
    close(client);
  }
}

void MetricsServer::Serve(int fd) {
  timeval timeout{static_cast<time_t>(kDeadline.count()), 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  const std::string head = ReadHead(fd);
  if (head.empty()) return;  // nothing whole in time: let it go
  const size_t sp1 = head.find(' '), sp2 = head.find(' ', sp1 + 1);
  const std::string method = head.substr(0, sp1);
  std::string path = sp1 == std::string::npos ? "" : head.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  std::string answer;
  if (method != "GET" && method != "HEAD") {
    answer = Response("405 Method Not Allowed", "text/plain", "only GET /metrics\n", false);
  } else if (path == "/metrics") {
    answer = Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render_(), method == "HEAD");
  } else {
    answer = Response("404 Not Found", "text/plain", "cachectl serves /metrics\n", method == "HEAD");
  }
  (void)shim::WriteFull(fd, answer.data(), answer.size());
}

}  // namespace cachectl
