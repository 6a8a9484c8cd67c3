// The cachectl subcommands. Each takes the arguments after its name and
// returns the process exit code, an ExitCode (protocol.h, docs/usage.md).
#pragma once

#include <string>
#include <vector>

#include "protocol.h"

namespace cachectl {

// Prints "cachectl: <message>" on stderr and returns `code`.
int Fail(ExitCode code, const std::string& message);

int RunReplay(const std::vector<std::string>& args);
int RunAdvise(const std::vector<std::string>& args);
int RunProbe(const std::vector<std::string>& args);
int RunAttach(const std::vector<std::string>& args);
int RunDetach(const std::vector<std::string>& args);
int RunFlush(const std::vector<std::string>& args);
int RunStats(const std::vector<std::string>& args);
int RunList(const std::vector<std::string>& args);
int RunTop(const std::vector<std::string>& args);
int RunSet(const std::vector<std::string>& args);
int RunStart(const std::vector<std::string>& args);
int RunStop(const std::vector<std::string>& args);
int RunCheck(const std::vector<std::string>& args);
int RunRebuild(const std::vector<std::string>& args);
int RunPin(const std::vector<std::string>& args);
int RunUnpin(const std::vector<std::string>& args);
int RunPins(const std::vector<std::string>& args);
int RunExport(const std::vector<std::string>& args);
int RunUnexport(const std::vector<std::string>& args);
int RunAdd(const std::vector<std::string>& args);
int RunRemove(const std::vector<std::string>& args);

}  // namespace cachectl
