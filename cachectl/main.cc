// cachectl: the command line. Dispatches to one subcommand per verb.
#include <cstdio>
#include <iostream>

#include "cachecore/base/process_memory.h"
#include "commands.h"

namespace cachectl {

int Fail(ExitCode code, const std::string& message) {
  std::cerr << "cachectl: " << message << "\n";
  return code;
}

namespace {

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>&);
  const char* summary;
};

const Command kCommands[] = {
    {"attach", RunAttach, "attach an SSD cache to a volume and serve the cached volume"},
    {"detach", RunDetach, "flush, then release the cache: the origin alone holds the data"},
    {"flush", RunFlush, "write every dirty line to the origin now"},
    {"stats", RunStats, "hit ratios, occupancy, errors of one cache"},
    {"list", RunList, "every cache, running or not"},
    {"top", RunTop, "every running cache on one screen, refreshed every second"},
    {"set", RunSet, "change a running cache's mode, cutoff, cleaner or placement window"},
    {"pin", RunPin, "keep a range of the volume in the cache (never evicted)"},
    {"unpin", RunUnpin, "let a pinned range be evicted by policy again"},
    {"pins", RunPins, "the pinned ranges, how much is cached, the limit"},
    {"export", RunExport, "serve the cached volume to other machines over NVMe/TCP (the kernel's target)"},
    {"unexport", RunUnexport, "stop serving it over NVMe/TCP"},
    {"add", RunAdd, "add another origin to a running cache, as a volume of its own"},
    {"remove", RunRemove, "take a volume off a cache, its dirty data on its origin first"},
    {"start", RunStart, "start a cache from its saved metadata (warm)"},
    {"stop", RunStop, "stop serving; the cache stays warm on the SSD"},
    {"check", RunCheck, "verify a stopped cache's superblock, metadata and data, offline"},
    {"rebuild", RunRebuild, "replace a damaged, stopped cache by a new, cold one (safe unless --force)"},
    {"replay", RunReplay, "replay a block trace through the engine and report hit ratios"},
    {"advise", RunAdvise, "the hit ratio at every cache size, from a recorded trace; the size to buy"},
    {"probe", RunProbe, "what an SSD does for a cache: MB/s and IOPS, and over-provisioning"},
};

void PrintUsage(std::ostream& out) {
  out << "usage: cachectl COMMAND [OPTIONS]\n\ncommands:\n";
  for (const Command& c : kCommands) out << "  " << c.name << "\t" << c.summary << "\n";
  out << "\n'cachectl COMMAND --help' describes a command's options.\n";
}

}  // namespace
}  // namespace cachectl

int main(int argc, char** argv) {
  using namespace cachectl;
  cachecore::ReturnFreedMemoryPromptly();
  if (argc < 2) {
    PrintUsage(std::cerr);
    return kExitUsage;
  }
  std::string verb = argv[1];
  if (verb == "--help" || verb == "-h" || verb == "help") {
    PrintUsage(std::cout);
    return kExitOk;
  }
  for (const Command& c : kCommands) {
    if (verb == c.name) return c.run(std::vector<std::string>(argv + 2, argv + argc));
  }
  return Fail(kExitUsage, "unknown command '" + verb + "' (try 'cachectl --help')");
}
