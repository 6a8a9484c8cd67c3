#include "stress_workload.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "engine_rig.h"

namespace cachecore::testing {

namespace {
constexpr uint64_t kSector = 512;
constexpr uint64_t kMaxSectors = 512;  // 256 KiB, the longest request
// Staged, not direct: a buffer this far off alignment makes the engine copy.
constexpr size_t kMisalign = 64;

std::string Range(uint64_t first, uint64_t count) {
  return "sectors [" + std::to_string(first) + ", +" + std::to_string(count) + ")";
}
}  // namespace

void FailureLog::Add(const std::string& what, std::optional<uint64_t> sector) {
  std::lock_guard lock(mu_);
  if (failed_.exchange(true)) return;
  first_ = what;
  sector_ = sector;
}

std::string FailureLog::first() const {
  std::lock_guard lock(mu_);
  return first_;
}

std::optional<uint64_t> FailureLog::sector() const {
  std::lock_guard lock(mu_);
  return sector_;
}

StressWorkload::StressWorkload(Engine& engine, ExpectedState& model, FailureLog& failures,
                               std::atomic<uint64_t>& next_id, const WorkloadOptions& options)
    : engine_(engine), model_(model), failures_(failures), next_id_(next_id), options_(options) {}

StressWorkload::~StressWorkload() { Stop(); }

void StressWorkload::Start() {
  if (options_.asynchronous) {
    Result<std::unique_ptr<Reactor>> reactor = Reactor::Create();
    if (!reactor.ok()) {
      failures_.Add("no reactor: " + reactor.status().ToString());
      return;
    }
    reactor_ = std::move(reactor.value());
  }
  for (int t = 0; t < options_.clients; ++t) {
    threads_.emplace_back([this, t] { ClientLoop(options_.seed * 1000 + static_cast<uint64_t>(t)); });
  }
  threads_.emplace_back([this] { ManagerLoop(options_.seed * 1000 + 999); });
  if (reactor_) threads_.emplace_back([this] { reactor_->Run(); });
}

// The clients wait for their own requests, so once they are joined nothing
// is in flight on the reactor.
void StressWorkload::Stop() {
  stop_.store(true);
  for (size_t i = 0; i < threads_.size(); ++i) {
    if (reactor_ && i + 1 == threads_.size()) reactor_->Stop();
    threads_[i].join();
  }
  threads_.clear();
  reactor_.reset();
}

namespace {
// One asynchronous call: started on the reactor, waited for by its client.
class ReactorCall final : public EngineCompletion, public ReactorTask {
 public:
  explicit ReactorCall(const std::function<void(EngineCompletion*)>& call) : call_(call) {}
  void Run() override { call_(this); }
  void Done(Status s) override {
    std::lock_guard lock(mu_);
    status_ = std::move(s);
    done_ = true;
    cv_.notify_all();
  }
  Status Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }

 private:
  const std::function<void(EngineCompletion*)>& call_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};
}  // namespace

Status StressWorkload::OnReactor(const std::function<void(EngineCompletion*)>& call) {
  ReactorCall c(call);
  reactor_->Post(&c);
  return c.Wait();
}

Status StressWorkload::DoRead(uint64_t offset, uint8_t* data, uint64_t length) {
  offset += options_.volume_base;
  if (!reactor_) return engine_.Read(offset, data, length);
  return OnReactor([&](EngineCompletion* c) { engine_.ReadAsync(offset, data, length, c); });
}

Status StressWorkload::DoWrite(uint64_t offset, const uint8_t* data, uint64_t length, bool fua) {
  offset += options_.volume_base;
  if (!reactor_) return engine_.Write(offset, data, length, fua);
  return OnReactor([&](EngineCompletion* c) { engine_.WriteAsync(offset, data, length, fua, c); });
}

Status StressWorkload::DoTrim(uint64_t offset, uint64_t length) {
  offset += options_.volume_base;
  if (!reactor_) return engine_.Discard(offset, length);
  return OnReactor([&](EngineCompletion* c) { engine_.DiscardAsync(offset, length, c); });
}

Status StressWorkload::DoSync() {
  if (!reactor_) return engine_.Sync();
  return OnReactor([&](EngineCompletion* c) { engine_.SyncAsync(c); });
}

bool StressWorkload::Outcome(const Status& s, const std::string& what) {
  if (s.ok()) return true;
  if (!power_failed_.load()) failures_.Add(what + " failed with the power on: " + s.ToString());
  return false;
}

void StressWorkload::ClientLoop(uint64_t seed) {
  Rng rng(seed);
  while (!stop_.load() && !failures_.failed()) {
    bool go_on = ClientStep(rng);
    ops_done_.fetch_add(1);
    if (!go_on) return;
  }
}

bool StressWorkload::ClientStep(Rng& rng) {
  const uint32_t r = rng() % 100;
  if (r < 52) return Write(rng, false);  // one in eight FUA
  if (r < 56) return Write(rng, true);   // write-zeroes
  if (r < 86) return Read(rng);
  if (r < 94) return Trim(rng);
  return Sync("client");
}

std::pair<uint64_t, uint64_t> StressWorkload::RandomRange(Rng& rng) const {
  const uint64_t sectors = model_.sectors();
  const uint64_t line_sectors = options_.line_size / kSector;
  uint64_t count;
  switch (rng() % 4) {
    case 0: count = 1 + rng() % 9; break;                 // in a block, or across two
    case 1: count = 8 * (1 + rng() % 4); break;           // whole blocks
    case 2: count = line_sectors * (1 + rng() % 2); break;  // a line or two
    default: count = 1 + rng() % (2 * line_sectors + 16); break;  // across lines
  }
  count = std::min({count, kMaxSectors, sectors});
  // Most requests in a region the cache can hold: rewrites of cached, dirty
  // and fresh blocks, which is where the announcements and epochs matter.
  const uint64_t area = rng() % 10 < 6 ? std::min(sectors, options_.hot_bytes / kSector) : sectors;
  uint64_t first = rng() % (std::max(area, count) - count + 1);
  if (rng() % 2 == 0) first -= first % 8;  // 4 KiB aligned
  return {first, count};
}

// Whole 4 KiB blocks in aligned memory: what a reactor serves itself (only
// on a volume of whole blocks, where such a range always exists).
void StressWorkload::WholeBlocks(uint64_t& first, uint64_t& count, size_t& skew) const {
  if (model_.sectors() % 8 != 0) return;
  first -= first % 8;
  count = std::min((count + 7) / 8 * 8, (model_.sectors() - first) / 8 * 8);
  skew = 0;
}

bool StressWorkload::Write(Rng& rng, bool zeroes) {
  auto [first, count] = RandomRange(rng);
  const bool fua = rng() % 8 == 0;
  size_t skew = rng() % 4 == 0 ? kMisalign : 0;
  if (options_.asynchronous && rng() % 2 == 0) WholeBlocks(first, count, skew);
  AlignedBuffer buffer(count * kSector + kMisalign);  // zeroed
  uint8_t* data = buffer.data() + skew;
  const uint64_t id = zeroes ? 0 : next_id_.fetch_add(1);
  for (uint64_t i = 0; !zeroes && i < count; ++i) StampSector(data + i * kSector, id, first + i);
  const uint64_t handle = model_.BeginWrite(first, count, id, fua);
  Status s = DoWrite(first * kSector, data, count * kSector, fua);
  if (s.ok()) model_.Acknowledge(handle);
  return Outcome(s, std::string(zeroes ? "write-zeroes" : "write " + std::to_string(id)) +
                        (fua ? " (fua) " : " ") + Range(first, count));
}

bool StressWorkload::Read(Rng& rng) {
  auto [first, count] = RandomRange(rng);
  size_t skew = rng() % 4 == 0 ? kMisalign : 0;
  if (options_.asynchronous && rng() % 2 == 0) WholeBlocks(first, count, skew);
  AlignedBuffer buffer(count * kSector + kMisalign);
  uint8_t* data = buffer.data() + skew;
  const uint64_t start = model_.Now();
  Status s = DoRead(first * kSector, data, count * kSector);
  const uint64_t end = model_.Now();
  if (!Outcome(s, "read " + Range(first, count))) return false;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t sector = first + i;
    std::optional<uint64_t> got = ReadStamp(data + i * kSector, sector);
    if (!got) {
      failures_.Add("a read of sector " + std::to_string(sector) + " returned data never written to it", sector);
      return false;
    }
    if (std::optional<std::string> why = model_.CheckRead(sector, *got, start, end)) {
      failures_.Add("a read of sector " + std::to_string(sector) + " returned write " +
                    std::to_string(*got) + ", which it may not hold now; allowed: " + *why, sector);
      return false;
    }
  }
  return true;
}

bool StressWorkload::Trim(Rng& rng) {
  auto [first, count] = RandomRange(rng);
  const uint64_t handle = model_.BeginTrim(first, count);
  Status s = DoTrim(first * kSector, count * kSector);
  if (s.ok()) model_.Acknowledge(handle);
  return Outcome(s, "trim " + Range(first, count));
}

bool StressWorkload::Sync(const char* who) {
  const uint64_t start = model_.BeginSync();
  Status s = DoSync();
  if (s.ok()) model_.SyncCompleted(start);
  return Outcome(s, std::string(who) + " sync");
}

void StressWorkload::ManagerLoop(uint64_t seed) {
  Rng rng(seed);
  while (!stop_.load() && !failures_.failed()) {
    // The clients' requests are the bulk; management now and then. (A
    // flush that the power cut interrupts retries for almost half a second
    // before it gives up: more of them would cost more than they find.)
    std::this_thread::sleep_for(std::chrono::microseconds(1000 + rng() % 4000));
    if (!ManagerStep(rng)) return;
  }
}

bool StressWorkload::ManagerStep(Rng& rng) {
  // Mostly between write-back and write-through, where the durability
  // rules differ; the other modes now and then.
  static const CacheMode kModes[] = {CacheMode::kWriteBack,   CacheMode::kWriteBack,
                                     CacheMode::kWriteBack,   CacheMode::kWriteThrough,
                                     CacheMode::kWriteThrough, CacheMode::kWriteAround,
                                     CacheMode::kReadOnly,    CacheMode::kPassThrough};
  switch (rng() % 8) {
    case 0:
    case 7: {
      const CacheMode mode = kModes[rng() % 8];
      Status s = engine_.SetMode(mode);
      if (s.code() == StatusCode::kBusy) busy_flushes_.fetch_add(1);  // clients kept lines busy
      return s.code() == StatusCode::kBusy || Outcome(s, std::string("set mode ") + CacheModeName(mode));
    }
    case 1: {
      Status s = engine_.Flush();
      if (s.code() == StatusCode::kBusy) busy_flushes_.fetch_add(1);
      return s.code() == StatusCode::kBusy || Outcome(s, "flush");
    }
    case 2: return Sync("manager");
    case 3:
    case 4: return PinOrUnpin(rng);
    default: return TogglePlacement(rng);
  }
}

bool StressWorkload::PinOrUnpin(Rng& rng) {
  auto [first, count] = RandomRange(rng);
  const uint64_t offset = options_.volume_base + first * kSector, length = count * kSector;
  switch (rng() % 5) {
    case 0: {
      Status s = engine_.Unpin(options_.volume_base, model_.sectors() * kSector);  // all of the volume
      return s.code() == StatusCode::kNotFound || Outcome(s, "unpin everything");
    }
    case 1:
    case 2: {
      Status s = engine_.Unpin(offset, length);
      return s.code() == StatusCode::kNotFound || Outcome(s, "unpin " + Range(first, count));
    }
    default: {
      Status s = engine_.Pin(offset, length);
      return s.code() == StatusCode::kBusy || Outcome(s, "pin " + Range(first, count));
    }
  }
}

// Open most of the time (setting it again wakes the mover, whose tick is
// longer than many a cycle), closed now and then.
bool StressWorkload::TogglePlacement(Rng& rng) {
  PlacementSettings p;
  p.rate_bytes_per_s = 1ull << 30;
  if (!engine_.placement().window || rng() % 3 != 0) {
    p.window = ParsePlacementWindow("00:00-24:00").value();
  }
  return Outcome(engine_.SetPlacement(p), "placement window");
}

}  // namespace cachecore::testing
