// EngineRig: an engine over fault-injecting memory devices and a RocksDB
// store on a PowerCutFs in a fresh temporary directory, with the moves the
// durability tests need: clean restart and power cut.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cachecore/engine/engine.h"
#include "support/fault_device.h"
#include "cachecore/devices/memory_device.h"
#include "cachecore/metadata/metadata_store.h"
#include "power_cut_fs.h"

namespace cachecore::testing {

// A directory under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct RigOptions {
  uint64_t origin_size = 8 << 20;
  uint64_t cache_data_size = 1 << 20;  // bytes for lines, after the 1 MiB header
  bool volatile_caches = true;         // devices keep unflushed writes apart
  uint64_t seed = 1;
  // Requests submitted on a reactor (the engine's calls, synchronous ones
  // too) complete later, in a random order (FaultDevice::CompleteOutOfOrder).
  bool out_of_order = false;
  Clock* clock = nullptr;              // the engine's time (nullptr: the system's); outlives the rig
};

class EngineRig {
 public:
  explicit EngineRig(const RigOptions& options = {});
  ~EngineRig();

  Status Create(const EngineConfig& config, bool force = false);
  Status Open(const EngineConfig& config);
  // Clean shutdown and open again.
  Status Restart(const EngineConfig& config);
  // Power fails: the devices' unsynced writes go as `mode` says, the
  // store's unsynced state is lost; then the engine is opened again.
  Status PowerCutAndReopen(const EngineConfig& config, PowerCutMode mode);
  // The first half of a power cut: from now on nothing reaches a device or
  // the store (the engine sees I/O errors); PowerCutAndReopen completes it.
  void Freeze();
  // Drops the engine without a clean shutdown and the store, as a crash
  // does, but with every write that reached the devices kept.
  void CloseStore();
  Status OpenStore(bool defer_compactions = false);  // as the daemon opens it to start

  Engine& engine() { return *engine_; }
  bool has_engine() const { return engine_ != nullptr; }
  void DropEngine() { engine_.reset(); }
  FaultDevice& origin() { return *origin_; }
  FaultDevice& cache() { return *cache_; }
  BlockDevice& raw_origin() { return *origin_mem_; }
  // Whether the origin itself (under any fault or power-cut layer) holds
  // FillPattern's bytes for (tag, offset) over [off, off + len).
  bool OriginHasPattern(uint64_t off, uint64_t len, uint32_t tag);
  BlockDevice& raw_cache() { return *cache_mem_; }
  MetadataStore& store() { return *store_; }
  PowerCutFs& store_fs() { return *storage_.fs; }
  EngineDevices devices();
  // Another origin for a volume `name` (Engine::AddVolume), faulted and
  // cut like the first; once there is one, devices() names every volume's
  // origin, the first's as `first_volume_name`.
  FaultDevice& AddOrigin(const std::string& name, uint64_t size);
  FaultDevice& extra_origin(const std::string& name);
  void ForgetOrigin(const std::string& name);  // its volume was removed
  std::string first_volume_name = "vol0";
  const std::string& metadata_path() const { return meta_path_; }

 private:
  TempDir dir_;
  Clock* clock_;
  std::string meta_path_;
  PowerCutStorage storage_;
  std::unique_ptr<BlockDevice> origin_mem_, cache_mem_;
  std::unique_ptr<FaultDevice> origin_, cache_;
  struct ExtraOrigin {
    std::string name;
    std::unique_ptr<BlockDevice> mem;
    std::unique_ptr<FaultDevice> faulted;
  };
  std::vector<ExtraOrigin> extra_;
  uint64_t seed_;
  std::unique_ptr<MetadataStore> store_;
  std::unique_ptr<Engine> engine_;
};

// Sector stamps: a 512-byte sector written by write `id` carries the id,
// its own sector number and a pattern derived from both, so a reader can
// tell which write it holds and whether it belongs to this sector at all.
void StampSector(uint8_t* sector, uint64_t id, uint64_t sector_number);
// The id the sector holds (0 for a never-written, all-zero sector), or
// nullopt when it is neither zero nor a whole stamp of this sector.
std::optional<uint64_t> ReadStamp(const uint8_t* sector, uint64_t sector_number);

}  // namespace cachecore::testing
