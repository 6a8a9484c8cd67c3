#include "plot.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "commands.h"

namespace cachectl {

namespace {

// gnuplot's single-quoted string: a quote is written twice.
std::string GnuplotQuoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace

bool CanWritePlot(const std::string& path, std::string* why) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = std::strerror(errno);
    return false;
  }
  close(fd);
  return true;
}

int DrawPng(const std::string& verb, const std::string& path, const std::string& body) {
  std::string script = "set terminal pngcairo size 800,480\nset output " + GnuplotQuoted(path) + "\n" + body;
  int fds[2];
  if (pipe(fds) != 0) return Fail(kExitFailed, verb + ": --plot: cannot start gnuplot");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[0], 0);
    close(fds[0]);
    close(fds[1]);
    int quiet = open("/dev/null", O_WRONLY);  // our one line says what failed
    dup2(quiet, 1);
    dup2(quiet, 2);
    execlp("gnuplot", "gnuplot", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[0]);
  bool sent = pid > 0 && write(fds[1], script.data(), script.size()) == static_cast<ssize_t>(script.size());
  close(fds[1]);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  if (pid < 0 || (WIFEXITED(status) && WEXITSTATUS(status) == 127)) {
    return Fail(kExitFailed, verb + ": --plot needs gnuplot (apt-get install gnuplot-nox)");
  }
  if (!sent || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    unlink(path.c_str());
    return Fail(kExitFailed, verb + ": gnuplot could not write " + path);
  }
  return kExitOk;
}

}  // namespace cachectl
