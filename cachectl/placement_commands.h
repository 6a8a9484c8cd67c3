// What stats --movement prints, shared with the stats command.
#pragma once

#include <string>

#include "paths.h"

namespace cachectl {

// Movement by hour over the last day and the hottest regions of cache
// NAME, as a table or one JSON object. Returns the exit code.
int PrintMovement(const Dirs& dirs, const std::string& name, bool json);

}  // namespace cachectl
