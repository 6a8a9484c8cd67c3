#include "engine_rig.h"

#include "block_io.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace cachecore::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/cachectl-test-XXXXXX";
  char* made = mkdtemp(tmpl.data());
  if (made == nullptr) std::abort();
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

EngineRig::EngineRig(const RigOptions& o)
    : clock_(o.clock), meta_path_(dir_.path() + "/metadata"), storage_(NewPowerCutStorage()),
      origin_mem_(NewMemoryDevice(o.origin_size, "origin")),
      cache_mem_(NewMemoryDevice(kDataOffset + o.cache_data_size, "cache")),
      origin_(std::make_unique<FaultDevice>(origin_mem_.get(), o.volatile_caches, o.seed)),
      cache_(std::make_unique<FaultDevice>(cache_mem_.get(), o.volatile_caches, o.seed + 1)),
      seed_(o.seed) {
  origin_->CompleteOutOfOrder(o.out_of_order);
  cache_->CompleteOutOfOrder(o.out_of_order);
  Status s = OpenStore();
  if (!s.ok()) ADD_FAILURE() << s.ToString();
}

EngineRig::~EngineRig() {
  engine_.reset();
  store_.reset();
}

Status EngineRig::OpenStore(bool defer_compactions) {
  MetadataOptions mo;
  mo.create_if_missing = true;
  mo.defer_compactions = defer_compactions;
  mo.env = storage_.env.get();
  Result<std::unique_ptr<MetadataStore>> store = MetadataStore::Open(meta_path_, mo);
  if (!store.ok()) return store.status();
  store_ = std::move(store.value());
  return Status::Ok();
}

void EngineRig::CloseStore() { store_.reset(); }

EngineDevices EngineRig::devices() {
  EngineDevices d{origin_.get(), cache_.get(), store_.get(), clock_};
  d.origin_name = first_volume_name;
  if (extra_.empty()) return d;
  if (origin_) d.volumes.push_back({first_volume_name, origin_.get()});
  for (const ExtraOrigin& e : extra_) d.volumes.push_back({e.name, e.faulted.get()});
  return d;
}

FaultDevice& EngineRig::AddOrigin(const std::string& name, uint64_t size) {
  ExtraOrigin e{name, NewMemoryDevice(size, name), nullptr};
  e.faulted = std::make_unique<FaultDevice>(e.mem.get(), true, seed_ + 2 + extra_.size());
  extra_.push_back(std::move(e));
  return *extra_.back().faulted;
}

FaultDevice& EngineRig::extra_origin(const std::string& name) {
  for (ExtraOrigin& e : extra_) {
    if (e.name == name) return *e.faulted;
  }
  std::abort();
}

void EngineRig::ForgetOrigin(const std::string& name) {
  if (name == first_volume_name) {
    origin_.reset();
    return;
  }
  std::erase_if(extra_, [&](const ExtraOrigin& e) { return e.name == name; });
}

Status EngineRig::Create(const EngineConfig& config, bool force) {
  Result<std::unique_ptr<Engine>> e = Engine::Create(devices(), config, force ? Replace::kCleanCache : Replace::kNothing);
  if (!e.ok()) return e.status();
  engine_ = std::move(e.value());
  return Status::Ok();
}

Status EngineRig::Open(const EngineConfig& config) {
  Result<std::unique_ptr<Engine>> e = Engine::Open(devices(), config);
  if (!e.ok()) return e.status();
  engine_ = std::move(e.value());
  return Status::Ok();
}

Status EngineRig::Restart(const EngineConfig& config) {
  CACHECORE_RETURN_IF_ERROR(engine_->Shutdown());
  engine_.reset();
  return Open(config);
}

void EngineRig::Freeze() {
  if (origin_) origin_->FailAlways(kFaultAll);
  for (ExtraOrigin& e : extra_) e.faulted->FailAlways(kFaultAll);
  cache_->FailAlways(kFaultAll);
  storage_.fs->PowerCut();
}

Status EngineRig::PowerCutAndReopen(const EngineConfig& config, PowerCutMode mode) {
  // The power goes everywhere at once. The dying engine's background
  // threads (cleaner, mover) may be mid-work, so first nothing more reaches
  // a device (what they see then are I/O errors, which the engine handles
  // anyway), then the store; only then does each device lose what it had
  // not made durable. Cutting one device while the rest still worked let
  // the cleaner sync a record whose data the cache had just lost, or copy
  // a block the cut had reverted: states no real power cut makes.
  Freeze();
  if (origin_) origin_->PowerCut(mode);
  for (ExtraOrigin& e : extra_) e.faulted->PowerCut(mode);
  cache_->PowerCut(mode);
  engine_.reset();
  store_.reset();
  storage_.fs->Restore();
  if (origin_) origin_->ClearFaults();
  for (ExtraOrigin& e : extra_) e.faulted->ClearFaults();
  cache_->ClearFaults();
  CACHECORE_RETURN_IF_ERROR(OpenStore());
  return Open(config);
}

namespace {
uint64_t PatternWord(uint64_t id, uint64_t sector) {
  return (id * 0x9E3779B97F4A7C15ull) ^ (sector * 0xC2B2AE3D27D4EB4Full) ^ 0x5A5A5A5A5A5A5A5Aull;
}
}  // namespace

void StampSector(uint8_t* p, uint64_t id, uint64_t sector) {
  std::memcpy(p, &id, 8);
  std::memcpy(p + 8, &sector, 8);
  uint64_t w = PatternWord(id, sector);
  for (size_t off = 16; off < 512; off += 8) {
    std::memcpy(p + off, &w, 8);
    w = w * 6364136223846793005ull + 1442695040888963407ull;
  }
}

std::optional<uint64_t> ReadStamp(const uint8_t* p, uint64_t sector) {
  static const uint8_t kZero[512] = {};
  if (std::memcmp(p, kZero, 512) == 0) return 0;
  uint64_t id;
  std::memcpy(&id, p, 8);
  uint8_t expect[512];
  StampSector(expect, id, sector);
  if (std::memcmp(p, expect, 512) != 0) return std::nullopt;
  return id;
}

bool EngineRig::OriginHasPattern(uint64_t off, uint64_t len, uint32_t tag) {
  AlignedBuffer got(len), want(len);
  EXPECT_TRUE(raw_origin().Read(off, got.data(), len).ok());
  FillPattern(want.data(), off, len, tag);
  return std::memcmp(got.data(), want.data(), len) == 0;
}

}  // namespace cachecore::testing
