#include "nbdkit_server.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace cachecore::testing {

NbdkitServer::NbdkitServer(const std::string& dir, const std::vector<std::string>& args)
    : socket_(dir + "/nbdkit.sock"), pid_file_(dir + "/nbdkit.pid") {
  Start(args);
}

void NbdkitServer::Start(const std::vector<std::string>& args) {
  // nbdkit creates the socket before it listens (a connection at once can
  // be refused) and writes its pid file once it accepts connections.
  std::vector<std::string> argv = {"nbdkit", "--foreground", "--exit-with-parent", "-U", socket_,
                                   "-P", pid_file_};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = fork();
  if (pid_ == 0) {
    std::vector<char*> c;
    for (std::string& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    execvp("nbdkit", c.data());
    _exit(127);
  }
  ASSERT_GT(pid_, 0) << "fork failed";
  struct stat st {};
  for (int i = 0; i < 1000 && stat(pid_file_.c_str(), &st) != 0; ++i) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      FAIL() << "nbdkit exited at start (is it installed? run scripts/setup.sh)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(stat(pid_file_.c_str(), &st), 0) << "nbdkit did not become ready in 10 s (" << socket_ << ")";
}

NbdkitServer::~NbdkitServer() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
}

}  // namespace cachecore::testing
