// What the other verbs need of exports (export_commands.cc): detach and
// stop take them down (or refuse), start brings them back, stats and list
// show them.
#pragma once

#include <string>

#include "paths.h"
#include "protocol.h"

namespace cachectl {

// Before `verb` (detach, stop) ends serving NAME: 0 to go on (not
// exported, or exported and --force took it down, or the export was
// only a record no longer served), else the exit status after one line
// saying what to do. `forget`: the record goes too (detach); otherwise it
// stays, and the next start serves the export again (stop).
int ReleaseExport(const Dirs& dirs, const std::string& name, const std::string& verb, bool force, bool forget);

// After start: serves the export recorded for NAME again (the kernel's
// target forgets everything at a reboot). A failure (the address not yet
// configured, no nvmet) is a warning on stderr: the cache runs, and
// `cachectl export` serves the export again later.
void RestoreExport(const Dirs& dirs, const std::string& name);

// The export's fields for stats and list: nvme_export.{address,nqn,hosts,live}.
void AddExportFields(const Dirs& dirs, const std::string& name, Fields* fields);

}  // namespace cachectl
