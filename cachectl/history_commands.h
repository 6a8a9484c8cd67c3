// stats NAME --history: the last day of a cache a minute a row (history.h).
#pragma once

#include <string>

#include "paths.h"

namespace cachectl {

// Prints the history as a table (or JSON), and with `plot` also draws it
// to that PNG with gnuplot. Returns the exit code.
int PrintHistory(const Dirs& dirs, const std::string& name, bool json, const std::string& plot);

}  // namespace cachectl
