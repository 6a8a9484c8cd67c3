#include "shim/nbd_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "nbd_async.h"
#include "nbd_connection.h"
#include "shim/socket_io.h"

namespace shim {

namespace {

class NbdServerImpl : public NbdServer, public ExportResolver {
 public:
  NbdServerImpl(BlockBackend* backend, const NbdServerOptions& options)
      // Never below one request of the largest size, or such a request,
      // which does not fit however much comes back, would wait for ever.
      : backend_(backend), options_(options), budget_(std::max<uint64_t>(options.buffer_bytes, kNbdMaxPayload)) {
    exports_[options.export_name] = backend;
  }

  ~NbdServerImpl() override { Stop(); }

  Status Listen() {
    if (pipe2(wake_, O_CLOEXEC) != 0) return Status::IoError("pipe");
    if (!options_.unix_path.empty()) {
      Result<int> fd = ListenUnix(options_.unix_path, options_.socket_mode, options_.socket_group);
      if (!fd.ok()) return fd.status();
      listeners_.push_back(fd.value());
    }
    if (!options_.tcp_address.empty()) {
      Result<int> fd = ListenTcp(options_.tcp_address);
      if (!fd.ok()) return fd.status();
      listeners_.push_back(fd.value());
      tcp_listener_ = fd.value();
    }
    if (listeners_.empty()) return Status::InvalidArgument("no socket to listen on");
    acceptor_ = std::thread([this] { AcceptLoop(); });
    return Status::Ok();
  }

  void Stop() override {
    std::lock_guard stop_lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
    if (acceptor_.joinable()) acceptor_.join();
    {
      std::lock_guard lock(mu_);
      for (auto& c : connections_) c.connection->Interrupt();
    }
    for (auto& c : connections_) {  // the acceptor is gone: no new entries
      bool removing = false;
      {
        std::lock_guard lock(mu_);
        removing = c.removing;
      }
      if (!removing) {
        c.thread.join();
        continue;
      }
      // A RemoveExport is joining it: wait for that.
      while (true) {
        {
          std::lock_guard lock(mu_);
          if (c.joined) break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    connections_.clear();
    for (int fd : listeners_) close(fd);
    for (int fd : wake_) if (fd >= 0) close(fd);
    if (!options_.unix_path.empty()) unlink(options_.unix_path.c_str());
  }

  uint64_t connections_served() const override { return served_.load(); }

  Status Adopt(int fd, const std::string& name) override {
    std::lock_guard stop_lock(stop_mu_);
    if (stopped_) return Status::Busy("the NBD server is stopping");
    BlockBackend* backend = nullptr;
    {
      std::lock_guard lock(mu_);
      auto it = exports_.find(name.empty() ? options_.export_name : name);
      if (it != exports_.end()) backend = it->second;
    }
    if (backend == nullptr) return Status::NotFound("no export named " + name);
    StartConnection(fd, /*from_kernel=*/true, nullptr, backend, name.empty() ? options_.export_name : name);
    return Status::Ok();
  }

  Status AddExport(const std::string& name, BlockBackend* backend) override {
    std::lock_guard lock(mu_);
    if (!exports_.emplace(name, backend).second) return Status::Busy("export " + name + " exists already");
    return Status::Ok();
  }

  Status RemoveExport(const std::string& name) override {
    // Not beside Stop(), which joins every connection itself.
    std::lock_guard stop_lock(stop_mu_);
    if (stopped_) return Status::Busy("the NBD server is stopping");
    std::vector<Running*> serving;
    {
      std::lock_guard lock(mu_);
      if (name == options_.export_name || exports_.erase(name) == 0) {
        return Status::NotFound("no export named " + name + " to remove");
      }
      for (Running& r : connections_) {
        // Not one an earlier removal of the same name ended already.
        if (r.export_name == name && !r.removing) {
          r.connection->Interrupt();
          r.removing = true;  // the acceptor leaves it to us
          serving.push_back(&r);
        }
      }
    }
    // Each ends once it has answered what it took (NbdConnection::Serve).
    for (Running* r : serving) {
      r->thread.join();
      std::lock_guard lock(mu_);
      r->joined = true;
    }
    return Status::Ok();
  }

  // ExportResolver: what a connection's client asked for.
  BlockBackend* Resolve(const std::string& name, NbdConnection* binding) override {
    std::lock_guard lock(mu_);
    const std::string& wanted = name.empty() ? options_.export_name : name;
    auto it = exports_.find(wanted);
    if (it == exports_.end()) return nullptr;
    if (binding != nullptr) {
      for (Running& r : connections_) {
        if (r.connection.get() == binding) r.export_name = wanted;
      }
    }
    return it->second;
  }

  std::vector<std::string> Names() override {
    std::lock_guard lock(mu_);
    std::vector<std::string> names;
    for (const auto& [name, backend] : exports_) names.push_back(name);
    return names;
  }

 private:
  struct Running {
    std::shared_ptr<NbdConnection> connection;
    std::thread thread;
    std::atomic<bool> done{false};
    bool from_kernel = false;  // adopted: not counted against max_connections
    std::string export_name;   // under mu_: what it serves, once chosen
    bool removing = false;     // under mu_: RemoveExport joins its thread
    bool joined = false;       // under mu_: ... and has
  };

  void AcceptLoop() {
    std::vector<pollfd> fds;
    for (int fd : listeners_) fds.push_back({fd, POLLIN, 0});
    fds.push_back({wake_[0], POLLIN, 0});
    while (true) {
      if (poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) return;
      if (fds.back().revents) return;  // Stop()
      Reap();
      for (size_t i = 0; i + 1 < fds.size(); ++i) {
        if (!(fds[i].revents & POLLIN)) continue;
        int client = accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (client < 0) continue;
        if (fds[i].fd == tcp_listener_) {
          // Replies go out as soon as they are written (a TLS record, a
          // reply's tail), not after the client's delayed ACK.
          int one = 1;
          setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        if (ClientConnections() >= options_.max_connections) {
          close(client);  // over the limit: the client sees the server hang up
          continue;
        }
        StartConnection(client, /*from_kernel=*/false, fds[i].fd == tcp_listener_ ? options_.tls.get() : nullptr);
      }
    }
  }

  size_t ClientConnections() {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const Running& r : connections_) n += !r.from_kernel && !r.done.load();
    return n;
  }

  void StartConnection(int fd, bool from_kernel, const NbdTls* tls = nullptr, BlockBackend* backend = nullptr,
                       const std::string& export_name = "") {
    ++served_;
    // The kernel's connections have a budget of their own: no socket client
    // can make the kernel's device wait.
    auto conn = std::make_shared<NbdConnection>(fd, backend ? backend : backend_, &options_,
                                                from_kernel ? &kernel_budget_ : &budget_, !from_kernel, tls, this);
    std::lock_guard lock(mu_);
    connections_.emplace_back();
    Running& r = connections_.back();
    r.connection = conn;
    r.from_kernel = from_kernel;
    r.export_name = export_name;
    r.thread = std::thread([&r] {
      r.connection->Serve();
      r.done = true;
    });
  }

  // Joins connections that have ended (called by the acceptor only).
  void Reap() {
    std::lock_guard lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (!it->done.load() || (it->removing && !it->joined)) { ++it; continue; }
      if (!it->removing) it->thread.join();
      it = connections_.erase(it);
    }
  }

  BlockBackend* backend_;
  NbdServerOptions options_;
  BufferBudget budget_;
  BufferBudget kernel_budget_{UINT64_MAX};  // each session's own cap bounds it
  std::vector<int> listeners_;
  int tcp_listener_ = -1;
  int wake_[2] = {-1, -1};
  std::thread acceptor_;
  std::mutex mu_;
  std::list<Running> connections_;
  std::map<std::string, BlockBackend*> exports_;  // under mu_
  std::atomic<uint64_t> served_{0};
  std::mutex stop_mu_;
  bool stopped_ = false;
};

}  // namespace

Result<std::unique_ptr<NbdServer>> NbdServer::Start(BlockBackend* backend,
                                                      const NbdServerOptions& options) {
  auto server = std::make_unique<NbdServerImpl>(backend, options);
  Status s = server->Listen();
  if (!s.ok()) return s;
  return std::unique_ptr<NbdServer>(std::move(server));
}

}  // namespace shim
