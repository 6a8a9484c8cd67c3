// NbdkitServer: nbdkit started for a test on a unix socket in a temporary
// directory (foreground, exits with the test), stopped by its process id;
// the constructor returns once nbdkit accepts connections. Tests only.
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
  // Where nbdkit wrote its process id (`dir`/nbdkit.pid), once it listened.
  const std::string& pid_file() const { return pid_file_; }
  bool running() const { return pid_ > 0; }

 private:
  void Start(const std::vector<std::string>& args);
  std::string socket_;
  std::string pid_file_;
  pid_t pid_ = -1;
};

}  // namespace cachecore::testing
