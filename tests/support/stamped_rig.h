// StampedRig: an EngineRig driven in whole 4 KiB blocks of stamped sectors
// (see StampSector), for the targeted durability and race tests; and step
// actions, which run test code at a named step of the engine's own (see
// cachecore/steps.h), on the engine's thread, to force an interleaving.
#pragma once

#include <functional>

#include "support/engine_rig.h"

namespace cachecore::testing {

class StampedRig : public EngineRig {
 public:
  using EngineRig::EngineRig;
  // Writes block `block` (4 KiB) with every sector stamped with `id`.
  void WriteStamped(uint64_t block, uint64_t id, bool fua = false);
  // The id every sector of the block holds; fails the test on a mixed or
  // foreign block (and returns UINT64_MAX).
  uint64_t ReadStamped(uint64_t block);
  // Detaches the cache, then the id the origin alone holds for the block:
  // what the block reads as once the cache is gone.
  uint64_t OriginStampedAfterDetach(uint64_t block);
};

// Runs `action` the first time the engine reaches `step`, on the thread
// that reached it (only once: an action that makes the engine reach the
// step again does not recurse). Replaces an earlier action for the same
// step; actions for other steps stay. Install while no engine call runs.
void OnStepOnce(const char* step, std::function<void()> action);
// Removes every action, fired or not.
void ClearStepAction();

// The power cut modes as test-name suffixes.
std::string PowerCutModeName(PowerCutMode mode);

}  // namespace cachecore::testing
