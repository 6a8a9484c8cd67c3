// The daemon's side of pinning and placement: the control commands
//   pin OFFSET LENGTH       unpin OFFSET LENGTH      pins
// (pin and unpin answer with the pin totals)
//   placement WINDOW|off RATE                        movement
// (offsets, lengths and rates in bytes) and their data lines.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "cachecore/engine.h"

namespace cachectl {

using DataSink = std::function<void(const std::string& key, const std::string& value)>;

// Answers `cmd` when it is one of the commands above (nothing otherwise).
// Changes are refused unless `may_change`. Data goes to `data`.
std::optional<cachecore::Status> PlacementCommand(cachecore::Engine& engine, const std::string& cmd,
                                                  bool may_change, const DataSink& data);

// The placement and pin fields of `cachectl stats`.
void PlacementStats(cachecore::Engine& engine, const DataSink& data);

}  // namespace cachectl
