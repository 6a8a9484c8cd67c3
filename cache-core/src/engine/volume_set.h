// VolumeSet: the origins of a cache's volumes as the one device the engine
// caches. Volume v's byte x is byte v.base + x of the cache's line space;
// bases are multiples of an alignment the engine picks (whole lines) with
// at least that much unused space between two volumes, so no line, request or cleaner batch ever
// spans two origins. The engine's records, slot table, dirty index and
// stripes see only line-space lines (a cache of format 2 is volume 0 at
// base 0: nothing in it changes). Requests are passed to the volume's
// origin at its own offset; a request outside every published volume
// fails with kOutOfRange, touching nothing. Not a public header.
//
// Threads: Find, Submit and SubmitAndWait from any thread at any time;
// Publish and Withdraw one at a time (the engine's volume lock). A volume
// is withdrawn only once nothing of it is cached and no request of it is
// in flight; its LiveVolume stays allocated until the set is destroyed, so
// a Find that raced the withdrawal reads a whole (if stale) entry.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "cachecore/devices/block_device.h"

namespace cachecore {

// At most this many volumes in one cache.
constexpr uint32_t kMaxVolumes = 64;
// A volume without a cutoff of its own takes the cache's.
constexpr uint64_t kCacheCutoff = UINT64_MAX;

// A volume's own counters (stats NAME --volume VOL); relaxed atomics.
struct VolumeCounters {
  std::atomic<uint64_t> read_hits{0}, read_misses{0}, write_hits{0}, write_misses{0};
  std::atomic<uint64_t> read_requests{0}, write_requests{0}, read_bytes{0}, write_bytes{0};
  // Lines of the volume in the cache, and of those the dirty ones (the
  // slot table keeps them, under its lock).
  std::atomic<uint64_t> occupancy_lines{0}, dirty_lines{0};
  void ResetAccessCounters();
};

// One published volume. Immutable but for the atomics.
struct LiveVolume {
  LiveVolume(uint32_t id, uint64_t base, uint64_t size, BlockDevice* origin)
      : id(id), base(base), size(size), origin(origin) {}
  const uint32_t id;
  const uint64_t base;  // bytes into the line space
  const uint64_t size;  // bytes
  BlockDevice* const origin;
  // False once its removal began: new requests are refused, the mover
  // leaves its lines alone.
  std::atomic<bool> accepting{true};
  // Its own sequential cutoff in bytes (0: off), or kCacheCutoff.
  std::atomic<uint64_t> sequential_cutoff{kCacheCutoff};
  VolumeCounters counters;
  bool Contains(uint64_t offset, uint64_t length) const {
    return offset >= base && offset - base <= size && length <= size - (offset - base);
  }
};

class VolumeSet final : public BlockDevice {
 public:
  VolumeSet() = default;
  ~VolumeSet() override;

  // Makes `origin` volume `id` at [base, base + origin->size_bytes()) of
  // the line space. REQUIRES: id < kMaxVolumes and unused; the range
  // overlaps no published volume's (the caller chose it: FreeBase).
  LiveVolume* Publish(uint32_t id, uint64_t base, BlockDevice* origin);
  // Takes volume `id` out: later requests to its range fail.
  void Withdraw(uint32_t id);
  // The published volume holding all of [offset, offset+length), or nullptr.
  LiveVolume* Find(uint64_t offset, uint64_t length = 1) const;
  LiveVolume* ById(uint32_t id) const {
    return id < kMaxVolumes ? volumes_[id].load(std::memory_order_acquire) : nullptr;
  }
  // The published volumes, by id.
  std::vector<LiveVolume*> All() const;
  // The lowest base, a multiple of `alignment` at least `alignment` bytes
  // clear of every published volume, where `size` bytes fit.
  uint64_t FreeBase(uint64_t size, uint64_t alignment) const;
  // An unused id, or kMaxVolumes when every one is taken.
  uint32_t FreeId() const;

  // The end of the last published volume: the line space in use.
  uint64_t size_bytes() const override { return end_.load(std::memory_order_acquire); }
  std::string identity() const override;
  bool supports_discard() const override;
  bool discards_without_waiting() const override;
  Status SubmitAndWait(std::span<IoRequest> requests) override;
  void Submit(AsyncIo& io) override;

 private:
  // Puts a routed request's offset and completion back, then completes it.
  struct Restore final : IoCompletion {
    void IoDone(AsyncIo& io) override;
  };
  Status FlushAll();
  Status SubmitRun(LiveVolume* volume, std::span<IoRequest> run);
  void UpdateEnd();

  std::array<std::atomic<LiveVolume*>, kMaxVolumes> volumes_{};
  // Shared by a flush of every origin; Withdraw takes it alone, so an
  // origin is never flushed once its volume was withdrawn (its device may
  // be closed then).
  std::shared_mutex flush_mu_;
  std::atomic<uint64_t> end_{0};
  Restore restore_;
  std::mutex retired_mu_;
  std::vector<std::unique_ptr<LiveVolume>> owned_;  // every volume ever published
};

}  // namespace cachecore
