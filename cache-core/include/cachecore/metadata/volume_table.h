// The volume table: the origins one cache serves (format 3). Each volume
// is a range of the cache's line space: its byte x is line-space byte
// base + x, so the line records, the slot table and the dirty index key
// lines by (volume, line) without a field of their own. Kept in the
// metadata store as one value ("cfg/volumes"), replaced whole and synced,
// so a crash leaves the table before or after a change, never between.
// A cache of format 2 has one volume, id 0 at base 0, named by its caller.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cachecore/base/status.h"

namespace cachecore {

constexpr char kVolumesKey[] = "volumes";

struct VolumeRecord {
  enum class State {
    kActive,
    // `remove` began: its lines are being cleaned and dropped. A start
    // serves it no requests; its removal is finished by RemoveVolume.
    kRemoving,
  };
  uint32_t id = 0;
  std::string name;
  uint64_t base = 0;  // bytes into the line space
  uint64_t size = 0;  // bytes
  std::string origin_identity;
  State state = State::kActive;
  // Its own sequential cutoff in bytes (0: off); none: the cache's.
  std::optional<uint64_t> sequential_cutoff;
  uint64_t end() const { return base + size; }
};

// One line per volume: "id base size state cutoff name\tidentity", the
// cutoff "-" for the cache's. Names are
// checked by the caller (no tabs or newlines: cachectl's names).
std::string EncodeVolumeTable(const std::vector<VolumeRecord>& table);
// kCorruption when a line does not parse.
Result<std::vector<VolumeRecord>> DecodeVolumeTable(const std::string& text);
// The end of the last volume: the line space in use, in bytes.
uint64_t LineSpaceBytes(const std::vector<VolumeRecord>& table);
const char* VolumeStateName(VolumeRecord::State state);

}  // namespace cachecore
