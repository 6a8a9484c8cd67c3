// Engine life cycle: create, open (with its identity checks), mode changes,
// shutdown; and the public entry points, which check their arguments and
// hand each line segment to engine_io.cc.
#include "cachecore/engine/engine.h"

#include <bit>

#include "cachecore/engine/steps.h"
#include "cachecore/crypto/encrypted_device.h"
#include "cachecore/devices/wipe.h"
#include "engine/engine_impl.h"

namespace cachecore {

namespace {

constexpr uint32_t kDefaultLineSize = 64 * 1024;
const char kModeKey[] = "mode";
const char kCutoffKey[] = "sequential_cutoff";
const char kDirtyTargetKey[] = "dirty_target_pct";
const char kDirtyHighKey[] = "dirty_high_pct";
const char kDirtyLowKey[] = "dirty_low_pct";
const char kCleanerBatchKey[] = "cleaner_batch_lines";
const char kRamCacheKey[] = "ram_cache_bytes";

// Numeric settings saved in the store override the caller's defaults.
template <typename T>
void LoadNumber(MetadataStore* store, const char* key, T* value) {
  if (Result<std::string> v = store->GetConfig(key); v.ok()) {
    *value = static_cast<T>(std::strtoull(v->c_str(), nullptr, 10));
  }
}

}  // namespace

Status Engine::CheckCleaner(const CleanerSettings& c) {
  if (c.dirty_target_pct <= c.dirty_low_pct && c.dirty_low_pct < c.dirty_high_pct &&
      c.dirty_high_pct <= 100 && c.batch_lines >= 1) {
    return Status::Ok();
  }
  return Status::InvalidArgument(
      "cleaner settings need target <= low < high <= 100 and a batch of at least 1 (got target " +
      std::to_string(c.dirty_target_pct) + ", high " + std::to_string(c.dirty_high_pct) + ", low " +
      std::to_string(c.dirty_low_pct) + ", batch " + std::to_string(c.batch_lines) + ")");
}

Status Engine::CheckRamCache(uint64_t bytes) {
  if (bytes == 0 || bytes >= kMinRamCacheBytes) return Status::Ok();
  return Status::InvalidArgument("a RAM tier needs at least " + std::to_string(kMinRamCacheBytes >> 20) +
                                 "M (or off), not " + std::to_string(bytes) + " bytes");
}

namespace {

Engine::CleanerSettings CleanerOf(const EngineConfig& c) {
  return {c.dirty_target_pct, c.dirty_high_pct, c.dirty_low_pct, c.cleaner_batch_lines};
}

Status CheckLineSize(uint32_t line_size) {
  if (!std::has_single_bit(line_size) || line_size < 4096 || line_size > (1u << 20)) {
    return Status::InvalidArgument("line size " + std::to_string(line_size) +
                                   " is not a power of two from 4K to 1M");
  }
  return Status::Ok();
}

Status CheckDevices(const EngineDevices& d) {
  if ((!d.origin && d.volumes.empty()) || !d.cache || !d.metadata) {
    return Status::InvalidArgument("origin, cache and metadata store are all required");
  }
  std::vector<BlockDevice*> origins{d.origin};
  for (const VolumeOrigin& v : d.volumes) origins.push_back(v.device);
  for (BlockDevice* origin : origins) {
    if (origin != nullptr && origin->identity() == d.cache->identity()) {
      return Status::InvalidArgument("origin and cache are the same device (" + origin->identity() + ")");
    }
  }
  return Status::Ok();
}

// Over-provisioning: the area past the last line is given back to the SSD
// once (a device that cannot discard keeps it unused all the same).
Status DiscardUnused(BlockDevice* cache, uint64_t from) {
  Status s = cache->Discard(from, cache->size_bytes() - from);
  return s.code() == StatusCode::kNotSupported ? Status::Ok() : s;
}

// Refuses to format over a cache that may hold data the origin lacks.
Status CheckSafeToFormat(const EngineDevices& d, bool force) {
  Result<Superblock> old = ReadSuperblock(d.cache);
  Result<CacheIdentity> stored = d.metadata->GetIdentity();
  if (old.ok() && !force) {
    return Status::Busy(d.cache->identity() + " already holds cachectl cache " +
                        UuidToString(old->identity.uuid) + " (origin " +
                        old->identity.origin_identity + "); use --force to replace it");
  }
  if (old.status().code() == StatusCode::kCorruption && !force) {
    return Status::Busy(d.cache->identity() + " holds a damaged cachectl superblock (" +
                        old.status().message() + "); use --force to replace it");
  }
  if (old.ok() && force) {
    // --force may replace a cache whose data is all on its origin; what
    // else it holds is known only to that cache's own metadata store.
    bool own_store = stored.ok() && stored->uuid == old->identity.uuid;
    if (!own_store && (!old->clean_shutdown || old->dirty_at_shutdown)) {
      return Status::Busy(d.cache->identity() + " holds cache " + UuidToString(old->identity.uuid) +
                          " of origin " + old->identity.origin_identity + ", which " +
                          (old->dirty_at_shutdown ? "has dirty data"
                                                  : "was not shut down cleanly and may have dirty data") +
                          "; start it and detach it first (--force never drops dirty data)");
    }
  }
  if (stored.ok() && !force) {
    return Status::Busy("the metadata store already describes cache " +
                        UuidToString(stored->uuid) + "; use --force to replace it");
  }
  uint64_t dirty = 0;
  Status scan = d.metadata->ForEachLine([&](uint64_t, const LineRecord& r) {
    for (BlockClass c : r.classes) {
      dirty += (c == BlockClass::kDirty || c == BlockClass::kDirtyFresh ||
                c == BlockClass::kDirtyOverwritten) ? 1 : 0;
    }
    return Status::Ok();
  });
  if (!scan.ok()) return scan;
  if (dirty > 0) {
    return Status::Busy("the metadata store records " + std::to_string(dirty) +
                        " dirty block(s) not yet on the origin; start that cache and flush it "
                        "first (--force never drops dirty data)");
  }
  return Status::Ok();
}

// RAM holds a line's number in 40 bits (engine/line_index.h).
Status CheckOriginLines(uint64_t origin_size, uint32_t line_size) {
  if (line_size == 0 || origin_size / line_size < PackedLines::kMaxOriginLines) return Status::Ok();
  return Status::InvalidArgument("origin of " + std::to_string(origin_size) + " bytes has too many lines of " +
                                 std::to_string(line_size) + " bytes (at most 2^40 - 2): use a larger --line-size");
}

}  // namespace

namespace {
uint64_t LineSpaceOf(const std::vector<Engine::Impl::PlacedVolume>& placed) {
  uint64_t end = 0;
  for (const auto& p : placed) end = std::max(end, p.record.end());
  return end;
}
}  // namespace

Engine::Impl::Impl(const EngineDevices& devices, const EngineConfig& cfg, const CacheIdentity& id,
                   const std::vector<PlacedVolume>& placed)
    : dev(devices), raw_origin(&volumes), origin_meter(&volumes), config(cfg),
      identity(id), line_size(id.line_size),
      blocks_per_line(id.line_size / kBlockSize), capacity(static_cast<uint32_t>(id.line_count)),
      mode(cfg.mode), dirty_target_pct(cfg.dirty_target_pct), dirty_high_pct(cfg.dirty_high_pct),
      dirty_low_pct(cfg.dirty_low_pct),
      cleaner_batch_lines(cfg.cleaner_batch_lines),
      admission(cfg.sequential_cutoff, cfg.admit_after_misses),
      slots(capacity, blocks_per_line, id, LineSpaceOf(placed), cfg.policy, cfg.promote_after_hits, stats),
      ram(blocks_per_line), pin_limit_lines(uint64_t{capacity} * kPinLimitPct / 100),
      heat(LineSpaceOf(placed), id.line_size) {
  // A saved size the memory refuses: the tier stays off, and stats say so.
  // (Whether a size suits this host is the daemon's to judge, at set.)
  if (CheckRamCache(cfg.ram_cache_bytes).ok()) (void)ram.Resize(cfg.ram_cache_bytes);
  MutexLock lock(volume_mu);  // nothing runs yet; for the analysis
  for (const PlacedVolume& p : placed) {
    LiveVolume* v = volumes.Publish(p.record.id, p.record.base, p.origin);
    v->accepting.store(p.record.state == VolumeRecord::State::kActive);
    v->sequential_cutoff.store(p.record.sequential_cutoff.value_or(kCacheCutoff));
    volume_table.push_back(p.record);
  }
  slots.CountVolumesIn(&volumes);
  dev.origin = &origin_meter;
  if (cfg.key) {
    encrypted_cache = NewEncryptedDevice(dev.cache, cfg.key, kDataOffset);
    dev.cache = encrypted_cache.get();
  }
}

Engine::Impl::~Impl() {
  StopAsync();  // runs what is queued (nothing, once the caller stopped its I/O)
  async.reset();
  StopMover();
  StopCleaner();
}

Status Engine::Impl::WriteSuperblock(bool clean_shutdown) {
  Superblock sb;
  sb.identity = identity;
  sb.line_space = volumes.size_bytes();
  sb.clean_shutdown = clean_shutdown;
  sb.dirty_at_shutdown = stats.dirty_lines.load() > 0;
  sb.encrypted = config.key != nullptr;
  if (sb.encrypted) sb.key_check = config.key->CheckValue(identity.uuid);
  AlignedBuffer buf(kSuperblockSize);
  EncodeSuperblock(sb, buf.data());
  CACHECORE_RETURN_IF_ERROR(dev.cache->Write(0, buf.data(), kSuperblockSize));
  return dev.cache->Flush();
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { (void)Shutdown(); }

Result<std::unique_ptr<Engine>> Engine::Create(const EngineDevices& d, const EngineConfig& config,
                                               Replace replace) {
  CACHECORE_RETURN_IF_ERROR(CheckDevices(d));
  EngineConfig cfg = config;
  if (cfg.line_size == 0) cfg.line_size = kDefaultLineSize;
  CACHECORE_RETURN_IF_ERROR(CheckLineSize(cfg.line_size));
  CACHECORE_RETURN_IF_ERROR(CheckCleaner(CleanerOf(cfg)));
  if (d.origin->size_bytes() % kBlockSize != 0) {
    return Status::InvalidArgument("origin size " + std::to_string(d.origin->size_bytes()) +
                                   " is not a multiple of 4 KiB");
  }
  CACHECORE_RETURN_IF_ERROR(CheckOriginLines(d.origin->size_bytes(), cfg.line_size));
  uint64_t need = kDataOffset + 2ull * cfg.line_size;
  if (d.cache->size_bytes() < need) {
    return Status::InvalidArgument("cache device is too small: " +
                                   std::to_string(d.cache->size_bytes()) + " bytes, at least " +
                                   std::to_string(need) + " needed for this line size");
  }
  if (replace != Replace::kDamagedCache) {
    CACHECORE_RETURN_IF_ERROR(CheckSafeToFormat(d, replace == Replace::kCleanCache));
  }
  if (cfg.key) {
    // Whatever the device held before (an earlier cache's plaintext) goes
    // first: an encrypted cache's device holds ciphertext alone.
    Result<WipeReport> wiped = WipeDevice(d.cache);
    if (!wiped.ok()) return wiped.status();
  }

  CacheIdentity id;
  id.uuid = NewRandomUuid();
  id.origin_size = d.origin->size_bytes();
  id.origin_identity = d.origin->identity();
  id.line_size = cfg.line_size;
  CACHECORE_RETURN_IF_ERROR(CheckRamCache(cfg.ram_cache_bytes));
  if (cfg.overprovision_pct > 90) {
    return Status::InvalidArgument("over-provisioning of " + std::to_string(cfg.overprovision_pct) +
                                   " % leaves too little for a cache (at most 90 %)");
  }
  const uint64_t all_lines = (d.cache->size_bytes() - kDataOffset) / cfg.line_size;
  id.line_count = std::min<uint64_t>(all_lines * (100 - cfg.overprovision_pct) / 100, UINT32_MAX - 1);
  if (id.line_count < 2) {
    return Status::InvalidArgument("with " + std::to_string(cfg.overprovision_pct) +
                                   " % over-provisioning the cache device holds fewer than two lines");
  }
  if (cfg.overprovision_pct > 0) {
    CACHECORE_RETURN_IF_ERROR(DiscardUnused(d.cache, kDataOffset + id.line_count * cfg.line_size));
  }
  // Metadata first, superblock last: a crash in between leaves a pair that
  // refuses to start (they disagree) rather than one that starts wrong.
  CACHECORE_RETURN_IF_ERROR(d.metadata->DeleteAllLines());
  CACHECORE_RETURN_IF_ERROR(d.metadata->PutConfig(kModeKey, CacheModeName(cfg.mode), false));
  CACHECORE_RETURN_IF_ERROR(
      d.metadata->PutConfig(kCutoffKey, std::to_string(cfg.sequential_cutoff), false));
  CACHECORE_RETURN_IF_ERROR(d.metadata->PutConfig(kRamCacheKey, std::to_string(cfg.ram_cache_bytes), false));
  for (auto [key, value] : {std::pair{kDirtyTargetKey, cfg.dirty_target_pct},
                            std::pair{kDirtyHighKey, cfg.dirty_high_pct},
                            std::pair{kDirtyLowKey, cfg.dirty_low_pct},
                            std::pair{kCleanerBatchKey, cfg.cleaner_batch_lines}}) {
    CACHECORE_RETURN_IF_ERROR(d.metadata->PutConfig(key, std::to_string(value), false));
  }
  CACHECORE_RETURN_IF_ERROR(Impl::ResetPlacement(d.metadata));
  const std::string key_check = cfg.key ? KeyCheckText(cfg.key->CheckValue(id.uuid)) : "";
  CACHECORE_RETURN_IF_ERROR(d.metadata->PutConfig(kKeyCheckKey, key_check, false));
  const VolumeRecord first{0, d.origin_name, 0, id.origin_size, id.origin_identity, VolumeRecord::State::kActive, std::nullopt};
  CACHECORE_RETURN_IF_ERROR(d.metadata->PutConfig(kVolumesKey, EncodeVolumeTable({first}), false));
  CACHECORE_RETURN_IF_ERROR(d.metadata->PutIdentity(id, true));
  ReachedStep("attach-1-store-formatted");
  auto impl = std::make_unique<Impl>(d, cfg, id, std::vector<Impl::PlacedVolume>{{first, d.origin}});
  CACHECORE_RETURN_IF_ERROR(impl->PersistDirtyMap(Impl::MapWrite::kAll));  // all clean
  impl->WriteSyncMark(d.metadata->LatestSequence());  // the identity, synced above
  CACHECORE_RETURN_IF_ERROR(impl->WriteSuperblock(false));
  ReachedStep("attach-2-superblock-written");
  impl->StartCleaner();
  impl->StartMover();
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

namespace {

// An encrypted cache opens with its key alone, and a cache that is not
// encrypted with none: before anything is read past the superblock. The
// superblock must say what the store says, so a superblock rewritten or
// replaced is caught; the key is then judged by the store's check value
// (CheckKeyWithStore, as the daemon does before a repair).
Status CheckKey(const EngineDevices& d, const Superblock& sb, const CacheKey* key) {
  Result<std::string> stored = StoredKeyCheck(d.metadata);
  if (!stored.ok()) return stored.status();
  if (stored.value() != (sb.encrypted ? KeyCheckText(sb.key_check) : "")) {
    return Status::Mismatch("the superblock on " + d.cache->identity() + " and the metadata store disagree on "
                            "the cache's encryption");
  }
  return CheckKeyWithStore(d.metadata, key);
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Open(const EngineDevices& d, const EngineConfig& config) {
  CACHECORE_RETURN_IF_ERROR(CheckDevices(d));
  Result<Superblock> sb = ReadSuperblock(d.cache);
  if (!sb.ok()) {
    const StatusCode code = sb.status().code();
    if (code == StatusCode::kNotFound) return Status::NotFound(d.cache->identity() + " holds no cachectl cache");
    if (code == StatusCode::kNotSupported) return Status::NotSupported(d.cache->identity() + ": " + sb.status().message());
    return Status::Corruption(d.cache->identity() + ": " + sb.status().message());
  }
  Result<CacheIdentity> stored = d.metadata->GetIdentity();
  if (!stored.ok()) {
    return Status::Mismatch("the metadata store holds no cache, but " + d.cache->identity() +
                            " holds cache " + UuidToString(sb->identity.uuid));
  }
  CACHECORE_RETURN_IF_ERROR(CheckFormatVersion(stored->format_version, "the metadata store"));
  // An upgrade cut short leaves the two at different versions: both known,
  // and the upgrade runs again below.
  const uint32_t from_version = std::min(sb->identity.format_version, stored->format_version);
  const bool upgrade = from_version < kFormatVersion;
  stored->format_version = sb->identity.format_version;
  std::string diff = DescribeIdentityDifference(sb->identity, stored.value(), "the superblock",
                                                "the metadata store");
  if (!diff.empty()) {
    return Status::Mismatch("the cache device and the metadata store belong to different caches: " +
                            diff);
  }
  CACHECORE_RETURN_IF_ERROR(CheckKey(d, sb.value(), config.key.get()));
  Result<std::vector<Impl::PlacedVolume>> placed = PlaceVolumes(d, sb->identity, upgrade);
  if (!placed.ok()) return placed.status();
  if (config.line_size != 0 && config.line_size != sb->identity.line_size) {
    return Status::Mismatch("line size: the cache uses " + std::to_string(sb->identity.line_size) +
                            " bytes, " + std::to_string(config.line_size) + " was asked for");
  }
  for (const Impl::PlacedVolume& p : placed.value()) {
    CACHECORE_RETURN_IF_ERROR(CheckOriginLines(p.record.end(), sb->identity.line_size));
  }
  CACHECORE_RETURN_IF_ERROR(CheckSyncMark(d.cache, sb->identity.uuid, d.metadata->LatestSequence()));
  if (kDataOffset + sb->identity.line_count * sb->identity.line_size > d.cache->size_bytes()) {
    return Status::Mismatch("the cache device is smaller than its superblock says");
  }
  EngineConfig cfg = config;
  cfg.line_size = sb->identity.line_size;
  if (Result<std::string> m = d.metadata->GetConfig(kModeKey); m.ok()) {
    Result<CacheMode> parsed = ParseCacheMode(m.value());
    if (parsed.ok()) cfg.mode = parsed.value();
  }
  LoadNumber(d.metadata, kCutoffKey, &cfg.sequential_cutoff);
  LoadNumber(d.metadata, kRamCacheKey, &cfg.ram_cache_bytes);
  LoadNumber(d.metadata, kDirtyHighKey, &cfg.dirty_high_pct);
  LoadNumber(d.metadata, kDirtyLowKey, &cfg.dirty_low_pct);
  LoadNumber(d.metadata, kCleanerBatchKey, &cfg.cleaner_batch_lines);
  // A cache saved before the target existed: the default, or its low
  // watermark when that is lower.
  cfg.dirty_target_pct = std::min(cfg.dirty_target_pct, cfg.dirty_low_pct);
  LoadNumber(d.metadata, kDirtyTargetKey, &cfg.dirty_target_pct);
  if (!CheckCleaner(CleanerOf(cfg)).ok()) {
    const EngineConfig defaults;  // a damaged setting: the defaults
    cfg.dirty_target_pct = defaults.dirty_target_pct;
    cfg.dirty_high_pct = defaults.dirty_high_pct;
    cfg.dirty_low_pct = defaults.dirty_low_pct;
    cfg.cleaner_batch_lines = defaults.cleaner_batch_lines;
  }
  auto impl = std::make_unique<Impl>(d, cfg, sb->identity, placed.value());
  impl->LoadPlacement();  // before the lines: pinned ones stay out of the policy
  std::vector<uint32_t> changed;
  CACHECORE_RETURN_IF_ERROR(impl->LoadLines(sb->clean_shutdown, &changed));
  CACHECORE_RETURN_IF_ERROR(d.metadata->AllowCompactions());
  // Everything checked: from here on the engine writes.
  CACHECORE_RETURN_IF_ERROR(impl->WriteSuperblock(false));
  CACHECORE_RETURN_IF_ERROR(impl->PersistDirtyMap(Impl::MapWrite::kAll));  // what the records say, exactly
  if (upgrade) {
    CACHECORE_RETURN_IF_ERROR(impl->UpgradeFormat(changed, from_version));
  } else {
    CACHECORE_RETURN_IF_ERROR(impl->RewriteRecords(changed));
  }
  impl->StartCleaner();
  impl->StartMover();
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Status CheckRange(const Engine::Impl& impl, uint64_t offset, uint64_t length, LiveVolume** volume) {
  if (impl.shut_down.load()) return Status::Busy("the cache is shut down");
  if (length == 0 || offset % kSectorSize != 0 || length % kSectorSize != 0) {
    return Status::InvalidArgument("offset and length must be non-zero multiples of 512");
  }
  LiveVolume* v = impl.volumes.Find(offset, length);
  if (v == nullptr) {
    const LiveVolume* near = impl.volumes.Find(offset);
    return Status::OutOfRange(near ? "request ends beyond the volume (" + std::to_string(near->size) + " bytes)"
                                   : "request at byte " + std::to_string(offset) + " lies in no volume");
  }
  if (!v->accepting.load()) return Status::Busy("the volume is being removed");
  if (volume != nullptr) *volume = v;
  return Status::Ok();
}

// After a metadata write or sync failed, nothing that changes what the
// cache holds or promises is accepted (its records could not say so); reads
// go on. A restart reopens the store.
Status RefuseIfMetadataFailed(const Engine::Impl& impl) {
  return impl.dev.metadata->failed() ? impl.dev.metadata->failure() : Status::Ok();
}

namespace {

// Hit and miss counters of one direction (reads or writes).
struct DirectionCounters {
  std::atomic<uint64_t>& hits;
  std::atomic<uint64_t>& misses;
  std::atomic<uint64_t>& full;
  std::atomic<uint64_t>& partial;
  std::atomic<uint64_t>& miss_requests;
};

void CountOutcome(const Engine::Impl::Tally& tally, const DirectionCounters& counters) {
  LiveStats::Bump(counters.hits, tally.hits);
  LiveStats::Bump(counters.misses, tally.misses);
  LiveStats::Bump(tally.misses == 0 ? counters.full
                  : tally.hits == 0 ? counters.miss_requests : counters.partial);
}
}  // namespace

// The stream detector sees every request. What does not bypass is heat for
// placement; a stream past the cutoff is no candidate for it either.
bool Engine::Impl::BypassAndHeat(uint64_t offset, uint64_t length, const LiveVolume& volume) {
  const uint64_t own = volume.sequential_cutoff.load(std::memory_order_relaxed);
  bool bypass = own == kCacheCutoff ? admission.SequentialBypass(offset, length)
                                    : admission.SequentialBypass(offset, length, own);
  if (bypass) LiveStats::Bump(stats.bypassed);
  else heat.Record(offset, length);
  return bypass;
}

void Engine::Impl::CountWrites(const Tally& tally, uint64_t offset) {
  CountOutcome(tally, {stats.write_hits, stats.write_misses, stats.write_full, stats.write_partial,
                       stats.write_miss_req});
  if (LiveVolume* v = volumes.Find(offset)) {
    LiveStats::Bump(v->counters.write_hits, tally.hits);
    LiveStats::Bump(v->counters.write_misses, tally.misses);
  }
}

void Engine::Impl::CountReads(const Tally& tally, uint64_t offset) {
  CountOutcome(tally, {stats.read_hits, stats.read_misses, stats.read_full, stats.read_partial,
                       stats.read_miss_req});
  if (LiveVolume* v = volumes.Find(offset)) {
    LiveStats::Bump(v->counters.read_hits, tally.hits);
    LiveStats::Bump(v->counters.read_misses, tally.misses);
  }
}

Status Engine::Impl::SyncRequest() {
  if (shut_down.load()) return Status::Busy("the cache is shut down");
  CACHECORE_RETURN_IF_ERROR(RefuseIfMetadataFailed(*this));
  return GroupSync();
}

Status Engine::Sync() {
  RequestInFlight counted(impl_->stats);
  return impl_->SyncRequest();
}

Status Engine::Flush(const FlushProgress& progress) {
  MutexLock lock(impl_->manage_mu);
  if (impl_->shut_down.load()) return Status::Busy("the cache is shut down");
  CACHECORE_RETURN_IF_ERROR(RefuseIfMetadataFailed(*impl_));
  return impl_->FlushAll(progress);
}

Status Engine::SetMode(CacheMode mode, const FlushProgress& progress) {
  MutexLock lock(impl_->manage_mu);
  if (impl_->shut_down.load()) return Status::Busy("the cache is shut down");
  CACHECORE_RETURN_IF_ERROR(RefuseIfMetadataFailed(*impl_));
  CacheMode old = impl_->mode.load();
  if (old == CacheMode::kWriteBack && mode != CacheMode::kWriteBack) {
    // New writes stop making dirty data while the old dirty data is cleaned.
    impl_->mode.store(CacheMode::kWriteThrough);
    Status s = impl_->CleanForModeSwitch(progress);
    if (!s.ok()) {
      impl_->mode.store(CacheMode::kWriteBack);
      return s;
    }
    ReachedStep("mode-1-cleaned");
  }
  impl_->mode.store(mode);
  CACHECORE_RETURN_IF_ERROR(impl_->dev.metadata->PutConfig(kModeKey, CacheModeName(mode), true));
  ReachedStep("mode-2-saved");
  return Status::Ok();
}

CacheMode Engine::mode() const { return impl_->mode.load(); }

EngineConfig Engine::settings() const {
  EngineConfig c = impl_->config;
  c.line_size = impl_->line_size;
  c.mode = impl_->mode.load();
  c.sequential_cutoff = impl_->admission.sequential_cutoff();
  c.dirty_target_pct = impl_->dirty_target_pct.load();
  c.dirty_high_pct = impl_->dirty_high_pct.load();
  c.dirty_low_pct = impl_->dirty_low_pct.load();
  c.cleaner_batch_lines = impl_->cleaner_batch_lines.load();
  c.ram_cache_bytes = impl_->ram.capacity_bytes();
  return c;
}

Status Engine::SetCleaner(const CleanerSettings& c) {
  CACHECORE_RETURN_IF_ERROR(CheckCleaner(c));
  MutexLock lock(impl_->cleaner_settings_mu);
  impl_->dirty_target_pct.store(c.dirty_target_pct);
  impl_->dirty_high_pct.store(c.dirty_high_pct);
  impl_->dirty_low_pct.store(c.dirty_low_pct);
  impl_->cleaner_batch_lines.store(c.batch_lines);
  impl_->cleaner_cv.notify_all();
  MetadataStore* m = impl_->dev.metadata;
  CACHECORE_RETURN_IF_ERROR(m->PutConfig(kDirtyTargetKey, std::to_string(c.dirty_target_pct), false));
  CACHECORE_RETURN_IF_ERROR(m->PutConfig(kDirtyHighKey, std::to_string(c.dirty_high_pct), false));
  CACHECORE_RETURN_IF_ERROR(m->PutConfig(kDirtyLowKey, std::to_string(c.dirty_low_pct), false));
  return m->PutConfig(kCleanerBatchKey, std::to_string(c.batch_lines), true);
}

Status Engine::SetSequentialCutoff(uint64_t bytes) {
  impl_->admission.set_sequential_cutoff(bytes);
  return impl_->dev.metadata->PutConfig(kCutoffKey, std::to_string(bytes), true);
}

Status Engine::SetRamCache(uint64_t bytes) {
  CACHECORE_RETURN_IF_ERROR(CheckRamCache(bytes));
  MutexLock lock(impl_->ram_settings_mu);  // the tier and the store agree
  MetadataStore* store = impl_->dev.metadata;
  Result<std::string> saved = store->GetConfig(kRamCacheKey);  // what a refusal puts back
  CACHECORE_RETURN_IF_ERROR(store->PutConfig(kRamCacheKey, std::to_string(bytes), true));
  if (impl_->ram.Resize(bytes)) return Status::Ok();
  const Status restored = store->PutConfig(kRamCacheKey, saved.ok() ? saved.value() : "0", true);
  return Status::NoSpace("not enough memory for a RAM tier of " + std::to_string(bytes >> 20) + " MiB" +
                         (restored.ok() ? "" : "; the size saved could not be put back: " + restored.message()));
}

StatsSnapshot Engine::stats() const {
  StatsSnapshot s = impl_->stats.Snapshot(impl_->capacity, impl_->failed.load());
  s.writeback_rate_bytes = impl_->WritebackRateNow();
  s.ram_cache_bytes = impl_->ram.capacity_bytes();
  s.ram_used_bytes = impl_->ram.held_blocks() * kBlockSize;
  s.metadata_failed = impl_->dev.metadata->failed();
  s.policy = impl_->slots.PolicyState();
  return s;
}
void Engine::ResetStats() {
  impl_->stats.ResetCounters();
  for (LiveVolume* v : impl_->volumes.All()) v->counters.ResetAccessCounters();
}
uint32_t Engine::line_size() const { return impl_->line_size; }
uint64_t Engine::capacity_lines() const { return impl_->capacity; }
bool Engine::started_from_snapshot() const { return impl_->started_from_snapshot; }

uint64_t Engine::overprovisioned_bytes() const {
  return impl_->dev.cache->size_bytes() - kDataOffset - uint64_t{impl_->capacity} * impl_->line_size;
}
const CacheIdentity& Engine::identity() const { return impl_->identity; }

Status Engine::Shutdown() {
  MutexLock lock(impl_->manage_mu);
  if (impl_->shut_down.load()) return Status::Ok();
  impl_->DrainWorkers();  // asynchronous requests taken complete first, and are synced below
  impl_->StopMover();
  impl_->StopCleaner();
  // Records no start settles (announcements, trims') are put again as RAM
  // has them, for the sync below to settle: a start from the snapshot then
  // finds the records it would have rewritten already rewritten.
  // The sync runs whatever came of the puts (it flushes both devices); a
  // failed put only makes the shutdown not clean.
  const Status put = impl_->dev.metadata->failed() ? Status::Ok() : impl_->PutUnsettledRecords();
  Status s = impl_->SyncAll();
  if (s.ok()) s = put;
  // Refuse new I/O from here on; a failed sync leaves the flag unclean, so
  // the next start proves what it finds.
  impl_->shut_down.store(true);
  if (!s.ok()) return s;  // SyncAll wrote the dirty-region map's changed pages
  // The next start reads tables rather than replaying the log. The log has
  // everything already: a failure costs that start time, nothing else.
  (void)impl_->dev.metadata->FlushMemtables();
  // And copies the slot table instead of decoding the records (after the
  // flush, which changes nothing the snapshot is checked against).
  (void)impl_->WriteSnapshot();
  return impl_->WriteSuperblock(true);
}

Status Engine::Detach(const FlushProgress& progress) {
  CACHECORE_RETURN_IF_ERROR(Flush(progress));
  ReachedStep("detach-1-flushed");
  CACHECORE_RETURN_IF_ERROR(Shutdown());
  ReachedStep("detach-2-shut-down");
  // Release: the cache device no longer claims to be a cache, so it can be
  // reused without --force. Everything is on the origin now.
  CACHECORE_RETURN_IF_ERROR(EraseSuperblock(impl_->dev.cache));
  ReachedStep("detach-3-superblock-erased");
  return Status::Ok();
}

}  // namespace cachecore
