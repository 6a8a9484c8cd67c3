// NbdkitServer: nbdkit started for a test on a unix socket in a temporary
// directory (foreground, exits with the test), stopped by its process id.
// Tests only.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace cachecore::testing {

class NbdkitServer {
 public:
  // `args`: the plugin and its parameters, e.g. {"memory", "size=4M"}.
  // Fails the current test (gtest) when nbdkit cannot start.
  NbdkitServer(const std::string& dir, const std::vector<std::string>& args);
  ~NbdkitServer();
  std::string uri() const { return "nbd+unix:///?socket=" + socket_; }
  bool running() const { return pid_ > 0; }

 private:
  void Start(const std::vector<std::string>& args);
  std::string socket_;
  pid_t pid_ = -1;
};

}  // namespace cachecore::testing
