#include "cachecore/metadata/volume_table.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace cachecore {

const char* VolumeStateName(VolumeRecord::State state) {
  return state == VolumeRecord::State::kActive ? "active" : "removing";
}

std::string EncodeVolumeTable(const std::vector<VolumeRecord>& table) {
  std::string out;
  for (const VolumeRecord& v : table) {
    const std::string cutoff = v.sequential_cutoff ? std::to_string(*v.sequential_cutoff) : "-";
    out += std::to_string(v.id) + " " + std::to_string(v.base) + " " + std::to_string(v.size) + " " +
           VolumeStateName(v.state) + " " + cutoff + " " + v.name + "\t" + v.origin_identity + "\n";
  }
  return out;
}

namespace {

Result<VolumeRecord> DecodeVolume(const std::string& line) {
  const size_t tab = line.find('\t');
  if (tab == std::string::npos) return Status::Corruption("volume table entry without an origin: " + line);
  std::istringstream head(line.substr(0, tab));
  VolumeRecord v;
  std::string state, cutoff;
  if (!(head >> v.id >> v.base >> v.size >> state >> cutoff) || (state != "active" && state != "removing")) {
    return Status::Corruption("volume table entry does not parse: " + line);
  }
  if (cutoff != "-") {
    char* end = nullptr;
    v.sequential_cutoff = std::strtoull(cutoff.c_str(), &end, 10);
    if (end == nullptr || *end != '\0') return Status::Corruption("volume table entry's cutoff does not parse: " + line);
  }
  head >> std::ws;
  std::getline(head, v.name);
  v.state = state == "active" ? VolumeRecord::State::kActive : VolumeRecord::State::kRemoving;
  v.origin_identity = line.substr(tab + 1);
  return v;
}

}  // namespace

Result<std::vector<VolumeRecord>> DecodeVolumeTable(const std::string& text) {
  std::vector<VolumeRecord> table;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    Result<VolumeRecord> v = DecodeVolume(line);
    if (!v.ok()) return v.status();
    table.push_back(std::move(v.value()));
  }
  if (table.empty()) return Status::Corruption("the volume table is empty");
  return table;
}

uint64_t LineSpaceBytes(const std::vector<VolumeRecord>& table) {
  uint64_t end = 0;
  for (const VolumeRecord& v : table) end = std::max(end, v.end());
  return end;
}

}  // namespace cachecore
