// Engine: caches an origin BlockDevice on a cache BlockDevice, with its
// metadata in a MetadataStore. The engine does not own the devices or the
// store; they must outlive it.
//
// Threads: Read, Write, Discard, Sync, Flush, SetMode and stats() may be
// called from any number of threads at once. A background thread cleans
// dirty lines in write-back mode.
//
// Durability (the contract of a disk with a volatile write cache):
// - a Write that completed before a Sync() completed, or a Write with fua,
//   survives a crash or power cut in every mode;
// - after a crash each 4 KiB block reads its last synced content or a
//   later one, never another block's data; a block whose data cannot be
//   proven by its checksum is read from the origin (clean) or fails with an
//   I/O error (dirty), never returned wrong.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cachecore/base/clock.h"
#include "cachecore/crypto/cache_key.h"
#include "cachecore/devices/block_device.h"
#include "cachecore/engine/cache_mode.h"
#include "cachecore/metadata/metadata_store.h"
#include "cachecore/placement/placement.h"
#include "cachecore/policy/eviction_policy.h"
#include "cachecore/engine/stats.h"

namespace cachecore {

struct EngineConfig {
  uint32_t line_size = 64 * 1024;        // power of two, 4 KiB .. 1 MiB
  CacheMode mode = CacheMode::kWriteThrough;
  uint64_t sequential_cutoff = 1 << 20;  // bytes of a sequential stream before it bypasses; 0: off
  uint32_t admit_after_misses = 1;       // n-hit filter: allocate on the nth miss of a line
  // Write-back under pressure (docs/design.md): the cleaner's controller
  // holds dirty lines near `dirty_target_pct` of the cache, backing off to
  // a trickle while clients keep the origin busy; above `dirty_low_pct`
  // (or with fewer clean and free lines than the reserve, 2 %) it cleans
  // flat out; above `dirty_high_pct` write-back writes are delayed, more
  // the fuller the cache, never failed. target <= low < high <= 100.
  uint32_t dirty_target_pct = 10;
  uint32_t dirty_high_pct = 60;
  uint32_t dirty_low_pct = 40;
  uint32_t cleaner_batch_lines = 64;     // lines per cleaner pass (sorted, coalesced)
  uint64_t error_threshold = 128;        // cache-device errors before the failed state
  bool background_cleaner = true;        // false: lines are cleaned only by Flush (and mode switches, the mover)
  uint32_t promote_after_hits = 1;       // kS3Fifo's: hits in the small queue to reach main (the adaptive policy chooses its own)
  PolicyKind policy = PolicyKind::kAdaptive;  // the others are for comparison (replay --policy)
  // Create only: this share (0..90 %) of the cache device's data area is
  // left unused, and discarded once, so the SSD keeps spare blocks for
  // writes (over-provisioning). The superblock's line count keeps it.
  uint32_t overprovision_pct = 0;
  // Encryption at rest (crypto/cache_key.h; docs/design.md): Create makes
  // an encrypted cache with this key; Open needs the key of an encrypted
  // cache (kMismatch without it, or with another) and refuses one for a
  // cache that is not encrypted. Null: no encryption.
  std::shared_ptr<const CacheKey> key;
  // The RAM tier (docs/design.md, "The RAM tier"): copies of the hottest
  // blocks in memory above the cache device, a read cache only. 0: off;
  // else at least kMinRamCacheBytes. Create saves it; Open takes the saved
  // one (Engine::SetRamCache changes it).
  uint64_t ram_cache_bytes = 0;
};

// The smallest RAM tier (one shard of 1024 blocks).
inline constexpr uint64_t kMinRamCacheBytes = 4 << 20;

// The completion of an asynchronous request: Done runs once, with the
// request's outcome, on the reactor that submitted it or on one of the
// engine's threads (so it must be safe from any thread).
class EngineCompletion {
 public:
  virtual void Done(Status status) = 0;

 protected:
  ~EngineCompletion() = default;
};

// Cleaning progress, for Flush(): dirty lines left and at the start.
using FlushProgress = std::function<void(uint64_t remaining_lines, uint64_t total_lines)>;

// A volume's origin by the volume's name (Engine::Open of a cache with
// several volumes).
struct VolumeOrigin {
  std::string name;
  BlockDevice* device = nullptr;
};

struct EngineDevices {
  // Create: the first volume's origin. Open: the origin of a cache with one
  // volume (whatever its name), unless `volumes` names them.
  BlockDevice* origin = nullptr;
  BlockDevice* cache = nullptr;
  MetadataStore* metadata = nullptr;
  // The time for the heat map, the movement log and the placement window;
  // nullptr: SystemClock(). Not owned; outlives the engine.
  Clock* clock = nullptr;
  std::string origin_name = {};  // Create, and the upgrade of a cache of format 2: the first volume's name
  // Open: every volume's origin, by name: each recorded volume must be
  // given; others are not used (an add or a removal a crash cut short:
  // Engine::volumes() says which the cache has). Empty: `origin`.
  std::vector<VolumeOrigin> volumes = {};
};

// What Engine::Create may format over.
enum class Replace {
  kNothing,       // refuse a cache device that holds a cache
  kCleanCache,    // attach --force: a cache whose data is all on its origin
  kDamagedCache,  // cachectl rebuild: whatever is there; the caller assessed
                  // the damage (cachecore/damage.h) and accepted what it found
};

class Engine {
 public:
  // Formats a new cache over `devices`: writes the superblock and a fresh
  // metadata store. `replace` says what it may format over (kNothing: a
  // device with a cachectl superblock is refused; kCleanCache: a cache that
  // may hold dirty data still is). Refuses bad geometry (line size,
  // a cache too small for one line, an origin not a multiple of 4 KiB).
  static Result<std::unique_ptr<Engine>> Create(const EngineDevices& devices,
                                                const EngineConfig& config, Replace replace);
  // Opens an existing cache, warm. Refuses, writing nothing, when the
  // superblock and the metadata store disagree, or either disagrees with the
  // origin; the message says what differs. `config` supplies tunables; the
  // line size comes from the superblock and the mode from the store.
  static Result<std::unique_ptr<Engine>> Open(const EngineDevices& devices,
                                              const EngineConfig& config);
  // Shuts down cleanly if Shutdown() was not called.
  ~Engine();

  // Offsets and lengths: multiples of 512 within the origin. Buffers: any
  // alignment; whole-block requests in 512-aligned buffers move no extra
  // copy (the devices read and write the caller's memory), others are
  // staged. After a failed Read the buffer's contents are undefined.
  // They run the asynchronous calls below on a reactor of the calling
  // thread until answered (one per thread and depth of nested calls, made
  // on the first; its failure to start is the call's error).
  Status Read(uint64_t offset, void* buffer, uint64_t length);
  Status Write(uint64_t offset, const void* buffer, uint64_t length, bool fua = false);
  // Asynchronous requests, for front ends on reactors
  // (cachecore/devices/reactor.h): each returns at once and `done` runs
  // when the request completes; the buffer must stay until then. Called on a
  // reactor, reads, writes and trims are served there (their I/O in flight
  // beside the reactor's other I/O; their records put by the engine's
  // committer thread; a request that finds a line busy, or being cleaned,
  // parked, not blocked); a sync waits in the engine's group commit
  // without a thread. Called off any reactor, they are served on a reactor
  // of the engine's own, whose one thread runs their `done`: it must not
  // block, nor call the synchronous calls (a request it waited for could
  // never be answered). No request has a thread of its own.
  void ReadAsync(uint64_t offset, void* buffer, uint64_t length, EngineCompletion* done);
  void WriteAsync(uint64_t offset, const void* buffer, uint64_t length, bool fua,
                  EngineCompletion* done);
  void DiscardAsync(uint64_t offset, uint64_t length, EngineCompletion* done);
  void SyncAsync(EngineCompletion* done);
  // Drops cached copies of the range and passes the discard to the origin
  // when it supports it. Dirty data in the range is dropped too.
  Status Discard(uint64_t offset, uint64_t length);
  // The client's FLUSH: every write completed before the call is durable
  // when it returns OK.
  Status Sync();
  // Cleans every dirty line now (writes them to the origin and makes that
  // durable). Reports progress; fails if a dirty block cannot be cleaned.
  Status Flush(const FlushProgress& progress = {});
  // Switches mode while I/O runs. Leaving write-back cleans first.
  Status SetMode(CacheMode mode, const FlushProgress& progress = {});
  CacheMode mode() const;
  // The tunables in force now (mode, cutoff, cleaner settings, ...).
  EngineConfig settings() const;
  // Sequential cutoff in bytes (0: off); takes effect at once, and is saved.
  Status SetSequentialCutoff(uint64_t bytes);
  // The RAM tier's size in bytes (0: off); it starts empty at once, while
  // requests run, and is saved. kInvalidArgument for a size under
  // kMinRamCacheBytes but 0 (nothing changes then). The caller judges
  // what the host can spare.
  Status SetRamCache(uint64_t bytes);
  // SetRamCache's check of the size alone (nothing changes).
  static Status CheckRamCache(uint64_t bytes);
  // The cleaner's target, watermarks (percent of lines dirty; see
  // EngineConfig) and lines per pass. kInvalidArgument unless
  // target <= low < high <= 100 and batch >= 1 (nothing changes then).
  // Takes effect at once, and is saved.
  struct CleanerSettings {
    uint32_t dirty_target_pct, dirty_high_pct, dirty_low_pct, batch_lines;
  };
  Status SetCleaner(const CleanerSettings& settings);
  // SetCleaner's check alone (nothing changes): for a caller that applies
  // several settings and must refuse before it changes any.
  static Status CheckCleaner(const CleanerSettings& settings);

  // Keeps the lines of [offset, offset+length) (rounded out to whole lines)
  // in the cache: never evicted, filled from the origin in the background
  // at the placement rate. Saved. kInvalidArgument for an empty range,
  // kOutOfRange past the volume, kBusy when the pinned lines would pass
  // kPinLimitPct of the cache (nothing changes then).
  Status Pin(uint64_t offset, uint64_t length);
  // Unpins the pinned lines of the range (whole lines, rounded out); they
  // stay cached and are evicted by policy again. kNotFound when none of
  // the range is pinned.
  Status Unpin(uint64_t offset, uint64_t length);
  PinReport pins() const;
  // Placement window and rate (see cachecore/placement.h); saved, in force
  // at once. kInvalidArgument for a rate of 0.
  Status SetPlacement(const PlacementSettings& settings);
  PlacementSettings placement() const;
  // Movement by hour over the last day, and the hottest origin regions.
  MovementReport movement() const;

  // ---- volumes (docs/design.md, "Volumes"). A cache serves one or more
  // origins; volume v's byte x is byte v.base + x of the cache's line space,
  // and every offset above is in the line space (the first volume is at 0).
  // The slots, the policy, the cleaner and the mover are shared.
  //
  // Adds `origin` as volume `name` at the first free base, saved (synced)
  // before it returns. Nothing changes when it is refused: kInvalidArgument
  // for an origin not a multiple of 4 KiB or one the metadata cannot
  // address (too many lines), kBusy for a name or an origin (by identity)
  // a volume has already, kNoSpace past kMaxVolumes. An I/O error after
  // the table was saved leaves the volume added (volumes() says so). The
  // caller checks the name.
  Result<VolumeInfo> AddVolume(const std::string& name, BlockDevice* origin);
  // Takes volume `name` out: no new request of it is accepted; its dirty
  // lines are cleaned (written to its origin, which is flushed); its lines
  // leave the cache; then the volume is forgotten, durably. The others go
  // on meanwhile. The caller has stopped the volume's requests first (one
  // still running may fail). kNotFound, kBusy for the last volume (detach
  // releases the cache), or the error that stopped the cleaning: the
  // volume then stays, refusing requests, and RemoveVolume may be called
  // again (so does a start after a crash: volumes() says `removing`).
  Status RemoveVolume(const std::string& name, const FlushProgress& progress = {});
  // Cleans volume `name`'s dirty lines now (Flush for one volume); the
  // volume goes on taking requests. kNotFound for no such volume.
  Status FlushVolume(const std::string& name, const FlushProgress& progress = {});
  // Cleans volume `name` and drops every line of it from the cache: the
  // volume stays, cold. For a volume whose origin was written around the
  // cache (an online volume given its own table back for a while): its
  // cached copies may be older. kBusy when it keeps taking writes.
  Status EvictVolume(const std::string& name, const FlushProgress& progress = {});
  // Volume `name`'s own sequential cutoff in bytes (0: off), or none to
  // take the cache's (SetSequentialCutoff). Saved; in force at once.
  Status SetVolumeCutoff(const std::string& name, std::optional<uint64_t> bytes);
  std::vector<VolumeInfo> volumes() const;
  // kNotFound when no volume has that name.
  Result<VolumeInfo> volume(const std::string& name) const;

  StatsSnapshot stats() const;
  void ResetStats();
  uint32_t line_size() const;
  uint64_t capacity_lines() const;
  // Whether this start copied the slot table from the snapshot its last
  // (clean) shutdown wrote, rather than decoding every record.
  bool started_from_snapshot() const;
  // Bytes of the cache device's data area that hold no line (over-provisioning).
  uint64_t overprovisioned_bytes() const;
  const CacheIdentity& identity() const;

  // Test only: compares every line record in the metadata store with the
  // slot table in RAM (same origin line per slot, no line recorded in two
  // slots, every cached line recorded, each block's valid and dirty state
  // and checksum alike) and the table with itself (block counts, free list,
  // map, dirty index). kCorruption naming the first differences. Not for
  // use while clients do I/O: it holds every stripe, which pauses the
  // cleaner and the mover.
  Status CheckRecordsAgreeForTest() const;
  // Test only: every clean block whose cached copy passes its checksum (so
  // would be served from the cache) holds what the origin holds, but in
  // the 512-byte sectors (numbered from the origin's start) for which
  // `may_differ` says so: trimmed ones, whose content is unspecified.
  // Otherwise an eviction changes what the block reads. Reads both
  // devices; the same terms as above.
  Status CheckCleanDataForTest(const std::function<bool(uint64_t sector)>& may_differ) const;

  // Test only, for an engine created with background_cleaner off: one tick
  // of the background cleaner as if `seconds` had passed since the last
  // (its controller's reading, then the passes it allows). Returns the
  // lines cleaned.
  Result<uint64_t> RunCleanerTickForTest(double seconds);

  // Syncs, stops the cleaner, records a clean shutdown. Dirty lines stay
  // (write-back data is safe on the cache device). Idempotent. The caller
  // stops its I/O first: a request already running when Shutdown is called
  // may finish after the clean shutdown is recorded, unsynced, and a crash
  // then would leave its block failing its checksum (later requests are
  // refused).
  Status Shutdown();
  // Flush, then Shutdown, then erase the superblock (the cache device is
  // released): afterwards the origin alone holds all data.
  Status Detach(const FlushProgress& progress = {});

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cachecore
