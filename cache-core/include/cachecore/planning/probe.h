// SSD profiling (cachectl probe): what a device does for a cache, measured
// through the engine's own libaio device with O_DIRECT.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cachecore/devices/block_device.h"
#include "cachecore/base/status.h"

namespace cachecore {

struct ProbeOptions {
  double seconds_per_test = 3;
  uint32_t queue_depth = 32;  // 4 KiB random tests: requests in flight
  bool write = false;         // also the write tests (destroys the data)
};

struct ProbeResult {
  uint64_t device_bytes = 0;
  double seq_read_mb_s = 0;         // 1 MiB reads, 4 in flight
  double rand_read_iops = 0;        // 4 KiB, queue_depth in flight
  std::optional<double> seq_write_mb_s;   // with `write`
  std::optional<double> rand_write_iops;  // with `write`
};

// Runs the read tests, and the write tests with `write` (over the whole
// device: everything on it is lost). kIoError on the first failed I/O.
Result<ProbeResult> ProbeDevice(BlockDevice& device, const ProbeOptions& options);

struct OverprovisionPoint {
  uint32_t unused_pct = 0;
  double rand_write_iops = 0;
};

// Steady-state-leaning 4 KiB random-write IOPS with each share of the
// device left unused: the device is written once sequentially, then for
// each share the unused tail is discarded and the rest written at random
// for the test's duration. Destroys the data.
Result<std::vector<OverprovisionPoint>> OverprovisionSweep(BlockDevice& device, const ProbeOptions& options,
                                                           std::span<const uint32_t> unused_pcts);
// The smallest share whose IOPS reach 90 % of the best point's.
uint32_t RecommendOverprovision(std::span<const OverprovisionPoint> points);

// What the device holds that a destructive probe would destroy: "a
// cachectl cache", "an ext4 filesystem", "an LVM physical volume", ...;
// empty when it starts with none of the signatures known here.
Result<std::string> DescribeContents(BlockDevice& device);

}  // namespace cachecore
