// FaultDevice: wraps any BlockDevice and injects what real disks do wrong:
// errors on the Nth operation or at a rate, persistent failure, and a volatile
// write cache whose unflushed writes a simulated power cut drops or tears.
// Tests only; thread-safe.
#pragma once

#include <cstdint>
#include <memory>

#include "cachecore/devices/block_device.h"

namespace cachecore {

// Which operations a fault applies to (bit mask).
enum FaultOps : unsigned {
  kFaultRead = 1u << 0,
  kFaultWrite = 1u << 1,
  kFaultFlush = 1u << 2,
  kFaultDiscard = 1u << 3,
  kFaultAll = 0xF,
};

enum class PowerCutMode {
  kDropUnsynced,  // every write since the last flush is lost
  kTear,          // each unsynced write lands whole, not at all, or as a prefix
                  // of its 4 KiB blocks (the SSD's atomic unit), at random
  kKeepUnsynced,  // every unsynced write lands: the device beat the host's
                  // metadata to stable storage (the adversary of ordering bugs)
};

class FaultDevice : public BlockDevice {
 public:
  // volatile_cache: keep writes apart until Flush(), as a disk's write cache.
  FaultDevice(BlockDevice* target, bool volatile_cache, uint64_t seed = 1);
  ~FaultDevice() override;

  uint64_t size_bytes() const override;
  std::string identity() const override;
  bool supports_discard() const override;
  Status SubmitAndWait(std::span<IoRequest> requests) override;
  // With CompleteOutOfOrder on, a request submitted on a reactor is kept
  // back and run and completed later, in a random order among those kept
  // (by a task posted to that reactor): completions come in any order, as
  // a real device's do. Otherwise it runs now, inline.
  void Submit(AsyncIo& io) override;
  bool discards_without_waiting() const override { return target_->discards_without_waiting(); }
  void CompleteOutOfOrder(bool on);
  // While on, requests submitted on a reactor are kept back, not run (a
  // disk with a queue that does not move); turned off, they run and
  // complete on their reactors. Off by default.
  void HoldRequests(bool on);
  // Requests submitted on a reactor that have not run yet: the queue depth.
  size_t queue_depth() const;

  // The nth matching operation from now (1 = the next one) fails once.
  void FailNth(unsigned ops, uint64_t n);
  // Each matching operation fails with this probability (0 disables).
  void FailAtRate(unsigned ops, double probability);
  // Every matching operation fails until ClearFaults().
  void FailAlways(unsigned ops);
  void ClearFaults();
  uint64_t injected_failures() const;
  // Operations of the kinds in `ops` run so far (failed ones too).
  uint64_t operations(unsigned ops) const;

  // Simulates losing power: unsynced writes are dropped or torn as `mode` says.
  // The device works again afterwards, like a disk after a reboot.
  void PowerCut(PowerCutMode mode);
  uint64_t unsynced_writes() const;

 private:
  struct State;
  class Drain;
  Status Execute(IoRequest& request);
  void RunDeferred(Drain& drain);
  Status LandPending();  // writes every unsynced write to the target
  BlockDevice* target_;
  std::unique_ptr<State> state_;
};

}  // namespace cachecore
