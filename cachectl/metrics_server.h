// The daemon's HTTP endpoint for Prometheus (attach --listen ADDR:PORT):
// GET /metrics answers the exposition text (prometheus.h); other paths 404,
// other methods 405. Off unless asked for. One connection at a time: a
// request must come whole, at most 8 KiB, within 5 s, and the answer's
// writes give up after 5 s, so a client that trickles or never reads
// holds the endpoint no longer than that.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "cachecore/base/status.h"

namespace cachectl {

class MetricsServer {
 public:
  // Listens on `address` ("host:port") and serves `render`'s text, called
  // for each scrape from the server's thread. Fails naming the address.
  static cachecore::Result<std::unique_ptr<MetricsServer>> Start(const std::string& address,
                                                                 std::function<std::string()> render);
  ~MetricsServer();
  // Stops listening and waits for the thread. Idempotent.
  void Stop();

 private:
  MetricsServer(int listen_fd, std::function<std::string()> render);
  void Loop();
  void Serve(int fd);

  int listen_fd_;
  int wake_[2] = {-1, -1};
  std::function<std::string()> render_;
  std::thread thread_;
};

}  // namespace cachectl
