// The cachectl subcommands. Each takes the arguments after its name and
// returns the process exit code: 0 done, 1 failed, 2 the command line was wrong.
#pragma once

#include <string>
#include <vector>

namespace cachectl {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// Prints "cachectl: <message>" on stderr and returns `code`.
int Fail(int code, const std::string& message);

int RunReplay(const std::vector<std::string>& args);

}  // namespace cachectl
