#include "cachecore/planning/probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "cachecore/metadata/superblock.h"

namespace cachecore {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kSmall = 4096;
constexpr uint64_t kLarge = 1 << 20;
constexpr uint32_t kLargeInFlight = 4;

std::chrono::nanoseconds Duration(double seconds) {
  return std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9));
}

double Elapsed(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// 1 MiB requests over [0, limit), kLargeInFlight at a time, from the start
// and round again, for `seconds`. Returns MB/s.
Result<double> Sequential(BlockDevice& dev, IoOp op, uint64_t limit, double seconds) {
  if (limit < kLarge) return Status::InvalidArgument("the device is smaller than 1 MiB");
  AlignedBuffer buffer(kLarge * kLargeInFlight);
  if (op == IoOp::kWrite) std::memset(buffer.data(), 0x5C, kLarge * kLargeInFlight);
  uint64_t bytes = 0, at = 0;
  const auto start = Clock::now(), end = start + Duration(seconds);
  // At least one round: a slow start (a loaded machine) must not measure nothing.
  do {
    IoRequest batch[kLargeInFlight];
    for (uint32_t i = 0; i < kLargeInFlight; ++i) {
      if (at + kLarge > limit) at = 0;
      batch[i] = {op, at, kLarge, buffer.data() + i * kLarge, Status()};
      at += kLarge;
    }
    CACHECORE_RETURN_IF_ERROR(dev.SubmitAndWait(batch));
    bytes += kLarge * kLargeInFlight;
  } while (Clock::now() < end);
  return bytes / Elapsed(start) / 1e6;
}

// 4 KiB requests at random aligned offsets in [0, limit), `depth` in flight
// (one thread each, as the engine's callers are), for `seconds`. Returns IOPS.
Result<double> Random(BlockDevice& dev, IoOp op, uint64_t limit, double seconds, uint32_t depth) {
  std::atomic<uint64_t> done{0};
  std::atomic<bool> failed{false};
  Status first_error = Status::Ok();
  std::mutex error_mu;
  const auto start = Clock::now(), end = start + Duration(seconds);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < depth; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer block(kSmall);
      std::memset(block.data(), 0xA7, kSmall);
      std::mt19937_64 rng(t + 1);
      // Each thread at least once: a thread started late must not measure nothing.
      for (bool first = true; !failed.load() && (first || Clock::now() < end); first = false) {
        Status s = op == IoOp::kRead ? dev.Read((rng() % (limit / kSmall)) * kSmall, block.data(), kSmall)
                                     : dev.Write((rng() % (limit / kSmall)) * kSmall, block.data(), kSmall);
        if (!s.ok()) {
          std::lock_guard lock(error_mu);
          if (!failed.exchange(true)) first_error = s;
          return;
        }
        done.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failed.load()) return first_error;
  return done.load() / Elapsed(start);
}

uint64_t WholeBlocks(uint64_t bytes) { return bytes / kSmall * kSmall; }

}  // namespace

Result<ProbeResult> ProbeDevice(BlockDevice& dev, const ProbeOptions& o) {
  ProbeResult r;
  r.device_bytes = dev.size_bytes();
  const uint64_t limit = WholeBlocks(r.device_bytes);
  Result<double> seq = Sequential(dev, IoOp::kRead, limit, o.seconds_per_test);
  if (!seq.ok()) return seq.status();
  r.seq_read_mb_s = *seq;
  Result<double> rnd = Random(dev, IoOp::kRead, limit, o.seconds_per_test, o.queue_depth);
  if (!rnd.ok()) return rnd.status();
  r.rand_read_iops = *rnd;
  if (!o.write) return r;
  seq = Sequential(dev, IoOp::kWrite, limit, o.seconds_per_test);
  if (!seq.ok()) return seq.status();
  r.seq_write_mb_s = *seq;
  rnd = Random(dev, IoOp::kWrite, limit, o.seconds_per_test, o.queue_depth);
  if (!rnd.ok()) return rnd.status();
  r.rand_write_iops = *rnd;
  CACHECORE_RETURN_IF_ERROR(dev.Flush());
  return r;
}

Result<std::vector<OverprovisionPoint>> OverprovisionSweep(BlockDevice& dev, const ProbeOptions& o,
                                                           std::span<const uint32_t> unused_pcts) {
  const uint64_t limit = WholeBlocks(dev.size_bytes());
  // Precondition: every block written once, so the device's spare area is
  // what over-provisioning leaves, not what it never used.
  AlignedBuffer buffer(kLarge);
  std::memset(buffer.data(), 0x3E, kLarge);
  for (uint64_t at = 0; at < limit; at += kLarge) {
    CACHECORE_RETURN_IF_ERROR(dev.Write(at, buffer.data(), std::min(kLarge, limit - at)));
  }
  std::vector<OverprovisionPoint> points;
  for (uint32_t pct : unused_pcts) {
    uint64_t used = WholeBlocks(limit / 100 * (100 - pct));
    if (used < kSmall) return Status::InvalidArgument("the device is too small to leave " + std::to_string(pct) + " % unused");
    if (used < limit) {
      Status d = dev.Discard(used, limit - used);
      if (!d.ok() && d.code() != StatusCode::kNotSupported) return d;
    }
    Result<double> iops = Random(dev, IoOp::kWrite, used, o.seconds_per_test, o.queue_depth);
    if (!iops.ok()) return iops.status();
    points.push_back({pct, *iops});
  }
  CACHECORE_RETURN_IF_ERROR(dev.Flush());
  return points;
}

uint32_t RecommendOverprovision(std::span<const OverprovisionPoint> points) {
  double best = 0;
  for (const auto& p : points) best = std::max(best, p.rand_write_iops);
  uint32_t pick = 100;
  for (const auto& p : points) {
    if (p.rand_write_iops >= 0.9 * best) pick = std::min(pick, p.unused_pct);
  }
  return points.empty() ? 0 : pick;
}

Result<std::string> DescribeContents(BlockDevice& dev) {
  Result<Superblock> sb = ReadSuperblock(&dev);
  if (sb.ok()) return std::string("a cachectl cache");
  if (sb.status().code() == StatusCode::kCorruption) return std::string("a damaged cachectl cache");
  if (sb.status().code() != StatusCode::kNotFound) return sb.status();
  const uint64_t n = std::min<uint64_t>(dev.size_bytes() / kSectorSize * kSectorSize, 72 * 1024);
  AlignedBuffer head(n);
  CACHECORE_RETURN_IF_ERROR(dev.Read(0, head.data(), n));
  auto has = [&](uint64_t at, const void* magic, size_t len) {
    return at + len <= n && std::memcmp(head.data() + at, magic, len) == 0;
  };
  static const uint8_t kBcache[] = {0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca,
                                    0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81};
  static const uint8_t kExt[] = {0x53, 0xEF}, kMd[] = {0xfc, 0x4e, 0x2b, 0xa9}, kBoot[] = {0x55, 0xAA};
  struct Signature {
    uint64_t at;
    const void* magic;
    size_t len;
    const char* what;
  } signatures[] = {
      {1080, kExt, 2, "an ext2/ext3/ext4 filesystem"},
      {0, "XFSB", 4, "an XFS filesystem"},
      {65600, "_BHRfS_M", 8, "a btrfs filesystem"},
      {0, "LUKS\xba\xbe", 6, "a LUKS encrypted volume"},
      {4096 + 24, kBcache, 16, "a bcache device"},
      {4096, kMd, 4, "an md RAID member"},
      {4086, "SWAPSPACE2", 10, "a swap area"},
      {3, "NTFS    ", 8, "an NTFS filesystem"},
      {512, "EFI PART", 8, "a GPT partition table"},
  };
  for (const Signature& s : signatures) {
    if (has(s.at, s.magic, s.len)) return std::string(s.what);
  }
  for (uint64_t sector = 0; sector < 4; ++sector) {
    if (has(sector * 512, "LABELONE", 8)) return std::string("an LVM physical volume");
  }
  if (has(510, kBoot, 2)) return std::string("a boot sector or MBR partition table");
  return std::string();
}

}  // namespace cachecore
