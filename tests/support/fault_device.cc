#include "support/fault_device.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

namespace cachecore {

namespace {
unsigned MaskOf(IoOp op) {
  switch (op) {
    case IoOp::kRead: return kFaultRead;
    case IoOp::kWrite: return kFaultWrite;
    case IoOp::kFlush: return kFaultFlush;
    case IoOp::kDiscard: return kFaultDiscard;
  }
  return 0;
}
}  // namespace

// The requests kept back on one reactor, run by a task posted to it: each
// completes on the thread that submitted it, as on a real device.
class FaultDevice::Drain final : public ReactorTask {
 public:
  explicit Drain(FaultDevice* device) : device_(device) {}
  void Run() override { device_->RunDeferred(*this); }

  std::vector<AsyncIo*> kept;  // under deferred_mu
  bool posted = false;         // under deferred_mu

 private:
  FaultDevice* device_;
};

struct FaultDevice::State {
  explicit State(bool volatile_cache, uint64_t seed)
      : order_rng(seed ^ 0x5eed), volatile_cache(volatile_cache), rng(seed) {}

  // An acknowledged write that has not been flushed yet: it lives only here
  // until Flush() moves it to the target or PowerCut() drops it.
  struct PendingWrite {
    uint64_t offset;
    std::vector<uint8_t> data;
  };

  std::mutex mu;
  // Requests kept back for out-of-order completion (CompleteOutOfOrder),
  // under their own mutex: they run, calling Execute, with it released.
  std::mutex deferred_mu;
  bool reorder = false;
  bool hold = false;  // under deferred_mu
  std::map<Reactor*, std::unique_ptr<Drain>> drains;  // one per reactor that submitted
  std::mt19937_64 order_rng;  // under deferred_mu
  bool volatile_cache;
  std::mt19937_64 rng;
  std::vector<PendingWrite> pending;
  unsigned nth_ops = 0;
  uint64_t nth_countdown = 0;
  unsigned rate_ops = 0;
  double rate = 0;
  unsigned always_ops = 0;
  uint64_t injected = 0;
  uint64_t ran[4] = {};  // per kind (MaskOf bit), under mu

  // Decides, under mu, whether this operation fails.
  bool ShouldFail(IoOp op) {
    unsigned m = MaskOf(op);
    for (unsigned kind = 0; kind < 4; ++kind) ran[kind] += (m >> kind) & 1u;
    bool fail = (always_ops & m) != 0;
    if ((nth_ops & m) && nth_countdown > 0 && --nth_countdown == 0) fail = true;
    if ((rate_ops & m) && std::uniform_real_distribution<double>(0, 1)(rng) < rate) fail = true;
    if (fail) ++injected;
    return fail;
  }
};

FaultDevice::FaultDevice(BlockDevice* target, bool volatile_cache, uint64_t seed)
    : target_(target), state_(std::make_unique<State>(volatile_cache, seed)) {}

FaultDevice::~FaultDevice() = default;

uint64_t FaultDevice::size_bytes() const { return target_->size_bytes(); }
std::string FaultDevice::identity() const { return target_->identity(); }
bool FaultDevice::supports_discard() const { return target_->supports_discard(); }

Status FaultDevice::SubmitAndWait(std::span<IoRequest> requests) {
  Status first;
  for (IoRequest& r : requests) {
    r.status = CheckRequest(r);
    if (r.status.ok()) r.status = Execute(r);
    if (!r.status.ok() && first.ok()) first = r.status;
  }
  return first;
}

void FaultDevice::CompleteOutOfOrder(bool on) {
  std::lock_guard lock(state_->deferred_mu);
  state_->reorder = on;
}

void FaultDevice::Submit(AsyncIo& io) {
  Reactor* reactor = Reactor::Current();
  {
    std::lock_guard lock(state_->deferred_mu);
    if ((state_->reorder || state_->hold) && reactor != nullptr) {
      std::unique_ptr<Drain>& drain = state_->drains[reactor];
      if (!drain) drain = std::make_unique<Drain>(this);
      drain->kept.push_back(&io);
      if (!drain->posted) {
        drain->posted = true;
        reactor->Post(drain.get());
      }
      return;
    }
  }
  BlockDevice::Submit(io);
}

void FaultDevice::HoldRequests(bool on) {
  std::lock_guard lock(state_->deferred_mu);
  state_->hold = on;
  if (on) return;
  for (auto& [reactor, drain] : state_->drains) {
    if (drain->kept.empty() || drain->posted) continue;
    drain->posted = true;
    reactor->Post(drain.get());
  }
}

size_t FaultDevice::queue_depth() const {
  std::lock_guard lock(state_->deferred_mu);
  size_t n = 0;
  for (const auto& [reactor, drain] : state_->drains) n += drain->kept.size();
  return n;
}

// Runs the kept-back requests (in a shuffled order when completing out of
// order), each completed right after it ran; those their completions
// submit wait for the next round. While held, they stay kept.
void FaultDevice::RunDeferred(Drain& drain) {
  std::vector<AsyncIo*> batch;
  {
    std::lock_guard lock(state_->deferred_mu);
    drain.posted = false;
    if (state_->hold) return;  // HoldRequests(false) posts it again
    batch.swap(drain.kept);
    if (state_->reorder) std::shuffle(batch.begin(), batch.end(), state_->order_rng);
  }
  for (AsyncIo* io : batch) {
    io->request.status = CheckRequest(io->request);
    if (io->request.status.ok()) io->request.status = Execute(io->request);
    io->done->IoDone(*io);
  }
}

// The volatile cache is held under one mutex for the whole operation: this
// device is for tests, where a simple, obviously ordered model beats speed.
Status FaultDevice::Execute(IoRequest& r) {
  std::lock_guard lock(state_->mu);
  if (state_->ShouldFail(r.op)) {
    return Status::IoError(std::string("injected ") + IoOpName(r.op) + " fault at " +
                           std::to_string(r.offset));
  }
  auto* buf = static_cast<uint8_t*>(r.buffer);
  if (!state_->volatile_cache) {
    IoRequest copy{r.op, r.offset, r.length, r.buffer, Status()};
    return target_->SubmitAndWait(std::span<IoRequest>(&copy, 1));
  }
  switch (r.op) {
    case IoOp::kWrite:
      state_->pending.push_back({r.offset, std::vector<uint8_t>(buf, buf + r.length)});
      return Status::Ok();
    case IoOp::kRead: {
      CACHECORE_RETURN_IF_ERROR(target_->Read(r.offset, buf, r.length));
      for (const auto& w : state_->pending) {  // later writes overlay earlier ones
        uint64_t lo = std::max(w.offset, r.offset);
        uint64_t hi = std::min(w.offset + w.data.size(), r.offset + r.length);
        if (lo < hi) std::memcpy(buf + (lo - r.offset), w.data.data() + (lo - w.offset), hi - lo);
      }
      return Status::Ok();
    }
    case IoOp::kFlush:
      CACHECORE_RETURN_IF_ERROR(LandPending());
      return target_->Flush();
    case IoOp::kDiscard:
      // A discard is ordered after earlier writes: land them first, as a
      // simple model of a drive that completes writes before trimming.
      CACHECORE_RETURN_IF_ERROR(LandPending());
      return target_->Discard(r.offset, r.length);
  }
  return Status::Ok();
}

// Caller holds state_->mu.
Status FaultDevice::LandPending() {
  for (const auto& w : state_->pending) {
    AlignedBuffer staging(w.data.size());
    std::memcpy(staging.data(), w.data.data(), w.data.size());
    CACHECORE_RETURN_IF_ERROR(target_->Write(w.offset, staging.data(), w.data.size()));
  }
  state_->pending.clear();
  return Status::Ok();
}

void FaultDevice::FailNth(unsigned ops, uint64_t n) {
  std::lock_guard lock(state_->mu);
  state_->nth_ops = ops;
  state_->nth_countdown = n;
}

void FaultDevice::FailAtRate(unsigned ops, double probability) {
  std::lock_guard lock(state_->mu);
  state_->rate_ops = ops;
  state_->rate = probability;
}

void FaultDevice::FailAlways(unsigned ops) {
  std::lock_guard lock(state_->mu);
  state_->always_ops = ops;
}

void FaultDevice::ClearFaults() {
  std::lock_guard lock(state_->mu);
  state_->nth_ops = state_->rate_ops = state_->always_ops = 0;
  state_->nth_countdown = 0;
  state_->rate = 0;
}

uint64_t FaultDevice::operations(unsigned ops) const {
  std::lock_guard lock(state_->mu);
  uint64_t n = 0;
  for (unsigned kind = 0; kind < 4; ++kind) n += (ops >> kind) & 1u ? state_->ran[kind] : 0;
  return n;
}

uint64_t FaultDevice::injected_failures() const {
  std::lock_guard lock(state_->mu);
  return state_->injected;
}

uint64_t FaultDevice::unsynced_writes() const {
  std::lock_guard lock(state_->mu);
  return state_->pending.size();
}

void FaultDevice::PowerCut(PowerCutMode mode) {
  std::lock_guard lock(state_->mu);
  if (mode != PowerCutMode::kDropUnsynced) {
    constexpr uint64_t kAtomicUnit = 4096;
    for (const auto& w : state_->pending) {
      uint64_t units = (w.data.size() + kAtomicUnit - 1) / kAtomicUnit;
      uint64_t keep = mode == PowerCutMode::kKeepUnsynced
                          ? units
                          : std::uniform_int_distribution<uint64_t>(0, units)(state_->rng);
      uint64_t bytes = std::min<uint64_t>(keep * kAtomicUnit, w.data.size());
      if (bytes == 0) continue;
      AlignedBuffer staging(bytes);
      std::memcpy(staging.data(), w.data.data(), bytes);
      (void)target_->Write(w.offset, staging.data(), bytes);
    }
  }
  state_->pending.clear();
}

}  // namespace cachecore
