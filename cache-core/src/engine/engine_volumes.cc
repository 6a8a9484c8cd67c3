// Volumes: one cache serving several origins (docs/design.md, "Volumes").
// Each is a range of the line space (engine/volume_set.h); adding one
// saves the table, then publishes it; removing one refuses its requests,
// cleans and drops its lines, then forgets it. The numbered steps are the
// crash points the crash-steps test stops at.
#include <algorithm>

#include "cachecore/engine/steps.h"
#include "engine/engine_impl.h"

namespace cachecore {

namespace {

// The origin given for `record`, checked against what the table recorded.
// `only`: the cache's one volume, spoken of as the cache.
Status CheckVolumeOrigin(const VolumeRecord& record, BlockDevice* origin, bool only) {
  const std::string which = only ? std::string("the cache") : "volume " + record.name;
  if (origin == nullptr) {
    return Status::Mismatch(which + " (" + record.origin_identity + ") was not given an origin");
  }
  if (record.size != origin->size_bytes()) {
    return Status::Mismatch("wrong origin: " + which + " was made for an origin of " +
                            std::to_string(record.size) + " bytes, " + origin->identity() + " has " +
                            std::to_string(origin->size_bytes()));
  }
  if (record.origin_identity != origin->identity()) {
    return Status::Mismatch("wrong origin: " + which + " belongs to " + record.origin_identity +
                            ", not to " + origin->identity());
  }
  return Status::Ok();
}

Result<std::vector<VolumeRecord>> LoadTable(MetadataStore* store, const CacheIdentity& identity,
                                            const std::string& first_name, bool upgrade) {
  Result<std::string> text = store->GetConfig(kVolumesKey);
  if (text.ok()) return DecodeVolumeTable(text.value());
  if (text.status().code() != StatusCode::kNotFound || !upgrade) {
    return Status::Corruption("the metadata store's volume table cannot be read: " + text.status().message());
  }
  // Format 2: its origin is volume 0, at 0.
  return std::vector<VolumeRecord>{
      {0, first_name, 0, identity.origin_size, identity.origin_identity, VolumeRecord::State::kActive, std::nullopt}};
}

VolumeInfo InfoOf(const VolumeRecord& r, const LiveVolume* live) {
  VolumeInfo info;
  info.id = r.id;
  info.name = r.name;
  info.base = r.base;
  info.size = r.size;
  info.origin_identity = r.origin_identity;
  info.removing = r.state == VolumeRecord::State::kRemoving;
  info.sequential_cutoff = r.sequential_cutoff;
  if (live == nullptr) return info;
  const VolumeCounters& c = live->counters;
  auto load = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  info.read_hits = load(c.read_hits);
  info.read_misses = load(c.read_misses);
  info.write_hits = load(c.write_hits);
  info.write_misses = load(c.write_misses);
  info.read_requests = load(c.read_requests);
  info.write_requests = load(c.write_requests);
  info.read_bytes = load(c.read_bytes);
  info.write_bytes = load(c.write_bytes);
  info.occupancy_lines = load(c.occupancy_lines);
  info.dirty_lines = load(c.dirty_lines);
  return info;
}

}  // namespace

Result<std::vector<Engine::Impl::PlacedVolume>> PlaceVolumes(const EngineDevices& d, const CacheIdentity& identity,
                                                             bool upgrade) {
  Result<std::vector<VolumeRecord>> table = LoadTable(d.metadata, identity, d.origin_name, upgrade);
  if (!table.ok()) return table.status();
  std::vector<Engine::Impl::PlacedVolume> placed;
  if (d.volumes.empty()) {
    if (table->size() != 1) {
      return Status::Mismatch("the cache serves " + std::to_string(table->size()) +
                              " volumes: each one's origin must be given");
    }
    placed.push_back({table->front(), d.origin});
  } else {
    for (const VolumeRecord& r : table.value()) {
      auto given = std::find_if(d.volumes.begin(), d.volumes.end(),
                                [&](const VolumeOrigin& v) { return v.name == r.name; });
      placed.push_back({r, given == d.volumes.end() ? nullptr : given->device});
    }
  }
  for (const auto& p : placed) CACHECORE_RETURN_IF_ERROR(CheckVolumeOrigin(p.record, p.origin, placed.size() == 1));
  return placed;
}

Status Engine::Impl::SaveVolumeTable(std::vector<VolumeRecord> table) {
  CACHECORE_RETURN_IF_ERROR(dev.metadata->PutConfig(kVolumesKey, EncodeVolumeTable(table), true));
  volume_table = std::move(table);
  return Status::Ok();
}

Status Engine::Impl::PersistLineSpace() {
  slots.ResizeDirtyMap(identity, volumes.size_bytes());
  // The superblock first: a crash before the map's pages are written leaves
  // pages of the old geometry, which fail the checksum the new one seeds
  // (a damage assessment then trusts no map, rather than a wrong one).
  CACHECORE_RETURN_IF_ERROR(WriteSuperblock(false));
  return PersistDirtyMap(MapWrite::kAll);
}

Result<VolumeInfo> Engine::AddVolume(const std::string& name, BlockDevice* origin) {
  Impl& im = *impl_;
  MutexLock manage(im.manage_mu);
  MutexLock lock(im.volume_mu);
  if (im.shut_down.load()) return Status::Busy("the cache is shut down");
  CACHECORE_RETURN_IF_ERROR(RefuseIfMetadataFailed(im));
  if (origin == nullptr) return Status::InvalidArgument("no origin given");
  if (origin->identity() == im.dev.cache->identity()) {
    return Status::InvalidArgument("origin and cache are the same device (" + origin->identity() + ")");
  }
  for (const VolumeRecord& r : im.volume_table) {
    if (r.name == name) return Status::Busy("the cache has a volume named " + name + " already");
    if (r.origin_identity == origin->identity()) {
      return Status::Busy(origin->identity() + " is cached already, as volume " + r.name);
    }
  }
  const uint64_t size = origin->size_bytes();
  if (size == 0 || size % kBlockSize != 0) {
    return Status::InvalidArgument("origin size " + std::to_string(size) + " is not a non-zero multiple of 4 KiB");
  }
  const uint32_t id = im.volumes.FreeId();
  if (id == kMaxVolumes) return Status::NoSpace("the cache serves " + std::to_string(kMaxVolumes) + " volumes, the most it can");
  const uint64_t base = im.volumes.FreeBase(size, im.VolumeAlignment());
  const uint64_t end_lines = (std::max(base + size, im.volumes.size_bytes()) + im.line_size - 1) / im.line_size;
  if (end_lines >= PackedLines::kMaxOriginLines || !im.slots.Addresses(end_lines)) {
    return Status::InvalidArgument("a volume of " + std::to_string(size) + " bytes would end past the lines this cache addresses (" +
                                   std::to_string(im.line_size) + "-byte lines, numbered below 2^32 in RAM): a cache with a larger --line-size addresses more");
  }
  std::vector<VolumeRecord> table = im.volume_table;
  table.push_back({id, name, base, size, origin->identity(), VolumeRecord::State::kActive, std::nullopt});
  CACHECORE_RETURN_IF_ERROR(im.SaveVolumeTable(std::move(table)));
  ReachedStep("add-1-table-saved");
  // The map covers the new range before any request can reach it (a
  // write-back write marks its region dirty).
  im.slots.ResizeDirtyMap(im.identity, std::max(base + size, im.volumes.size_bytes()));
  // Nothing of a volume that had this range before stays in RAM (a request
  // it took before its removal may have filled the tier after the last
  // forget).
  im.ram.ForgetLines(base / im.line_size, (base + size + im.line_size - 1) / im.line_size);
  LiveVolume* live = im.volumes.Publish(id, base, origin);
  CACHECORE_RETURN_IF_ERROR(im.PersistLineSpace());
  ReachedStep("add-2-line-space-saved");
  return InfoOf(im.volume_table.back(), live);
}

Status Engine::Impl::CleanVolume(const LiveVolume& v, const FlushProgress& progress) {
  const auto [first, end] = VolumeLines(v);
  return FlushAll(progress, first, end);
}

// Every cached line of the volume leaves the cache, its record deleted,
// then a sync makes the deletes durable. A line dirty again (a request the
// caller did not stop) stops it: kBusy, nothing of that line lost. The RAM
// tier forgets the volume's range either way: it may hold blocks of lines
// the cache let go of earlier, or of lines dropped before the stop (a
// read fills the tier only from a line still cached, under its stripe).
Status Engine::Impl::DropVolumeLines(const LiveVolume& v) {
  const auto [first, end] = VolumeLines(v);
  Status dropped = DropCachedLines(first, end);
  ram.ForgetLines(first, end);
  CACHECORE_RETURN_IF_ERROR(dropped);
  return SyncMetadata();
}

Status Engine::Impl::DropCachedLines(uint64_t first, uint64_t end) {
  const std::vector<uint64_t> cached = slots.CachedLinesIn(first, end);
  constexpr size_t kChunk = 4096;  // lines a batch
  for (size_t at = 0; at < cached.size(); at += kChunk) {
    RecordBatch batch;
    for (size_t k = at; k < std::min(cached.size(), at + kChunk); ++k) {
      if (Status dropped = DropLine(cached[k], batch); !dropped.ok()) {
        (void)Commit(batch, false);  // the slots emptied so far are freed, their deletes put
        return dropped;
      }
    }
    CACHECORE_RETURN_IF_ERROR(Commit(batch, false));
  }
  return Status::Ok();
}

Status Engine::Impl::DropLine(uint64_t line, RecordBatch& batch) {
  std::lock_guard cell(StripeOf(line));
  std::optional<uint32_t> slot = slots.Find(line);
  if (!slot) return Status::Ok();
  if (slots.AnyBeingCleaned(line, line + 1)) return Status::Busy("a line of the volume is being cleaned");
  for (uint32_t b = 0; b < blocks_per_line; ++b) {
    if (slots.Flags(*slot, b) & kDirty) return Status::Busy("the volume took a write while it was removed");
  }
  for (uint32_t b = 0; b < blocks_per_line; ++b) slots.Invalidate(*slot, b);
  slots.ReleaseIfEmpty(*slot, batch);
  return Status::Ok();
}

// The volume's lines are gone: its pins go, then it leaves the table
// (synced) and the line space.
Status Engine::Impl::FinishRemoval(const LiveVolume& v) {
  auto unpin = [](LineIntervals& next, uint64_t first, uint64_t end) -> Result<std::vector<LineIntervals::Interval>> {
    return next.Remove(first, end);  // none pinned: nothing to do
  };
  CACHECORE_RETURN_IF_ERROR(ChangePins(v.base, v.size, unpin, false));
  std::vector<VolumeRecord> table = volume_table;
  std::erase_if(table, [&](const VolumeRecord& r) { return r.id == v.id; });
  CACHECORE_RETURN_IF_ERROR(SaveVolumeTable(std::move(table)));
  ReachedStep("remove-3-forgotten");
  volumes.Withdraw(v.id);
  return PersistLineSpace();
}

Status Engine::RemoveVolume(const std::string& name, const FlushProgress& progress) {
  Impl& im = *impl_;
  MutexLock manage(im.manage_mu);  // no other add or remove meanwhile: the table stays ours to change
  Result<LiveVolume*> marked = im.MarkRemoving(name);
  if (!marked.ok()) return marked.status();
  LiveVolume* live = marked.value();
  ReachedStep("remove-1-marked");
  // Without volume_mu, so that volumes() (stats) answers meanwhile.
  CACHECORE_RETURN_IF_ERROR(im.EmptyVolume(*live, name, progress));
  ReachedStep("remove-2-dropped");
  MutexLock lock(im.volume_mu);
  return im.FinishRemoval(*live);
}

// Cleaned and dropped until nothing of it is left: a request it took
// before it stopped accepting may still have landed after a pass.
Status Engine::Impl::EmptyVolume(const LiveVolume& v, const std::string& name, const FlushProgress& progress) {
  const auto [first, end] = VolumeLines(v);
  for (int pass = 0;; ++pass) {
    CACHECORE_RETURN_IF_ERROR(CleanVolume(v, progress));
    CACHECORE_RETURN_IF_ERROR(DropVolumeLines(v));
    if (slots.CachedLinesIn(first, end).empty()) return Status::Ok();
    if (pass == 10) return Status::Busy("volume " + name + " still takes requests; stop its clients, then try again");
  }
}

Result<const LiveVolume*> Engine::Impl::FindLiveVolume(const std::string& name) {
  MutexLock lock(volume_mu);
  auto it = std::find_if(volume_table.begin(), volume_table.end(), [&](const VolumeRecord& r) { return r.name == name; });
  if (it == volume_table.end()) return Status::NotFound("the cache has no volume named " + name);
  return static_cast<const LiveVolume*>(volumes.ById(it->id));
}

Status Engine::EvictVolume(const std::string& name, const FlushProgress& progress) {
  Impl& im = *impl_;
  MutexLock manage(im.manage_mu);  // the volume stays while it is emptied
  Result<const LiveVolume*> live = im.FindLiveVolume(name);
  if (!live.ok()) return live.status();
  return im.EmptyVolume(*live.value(), name, progress);
}

Status Engine::FlushVolume(const std::string& name, const FlushProgress& progress) {
  Impl& im = *impl_;
  MutexLock manage(im.manage_mu);  // the volume stays while it is cleaned
  Result<const LiveVolume*> live = im.FindLiveVolume(name);
  if (!live.ok()) return live.status();
  return im.CleanVolume(*live.value(), progress);
}

Result<LiveVolume*> Engine::Impl::MarkRemoving(const std::string& name) {
  MutexLock lock(volume_mu);
  if (shut_down.load()) return Status::Busy("the cache is shut down");
  CACHECORE_RETURN_IF_ERROR(RefuseIfMetadataFailed(*this));
  auto it = std::find_if(volume_table.begin(), volume_table.end(), [&](const VolumeRecord& r) { return r.name == name; });
  if (it == volume_table.end()) return Status::NotFound("the cache has no volume named " + name);
  if (volume_table.size() == 1) {
    return Status::Busy("volume " + name + " is the cache's last: detach the cache to release it");
  }
  LiveVolume* live = volumes.ById(it->id);
  live->accepting.store(false);
  if (it->state == VolumeRecord::State::kActive) {
    std::vector<VolumeRecord> table = volume_table;
    for (VolumeRecord& r : table) {
      if (r.id == live->id) r.state = VolumeRecord::State::kRemoving;
    }
    if (Status saved = SaveVolumeTable(std::move(table)); !saved.ok()) {
      live->accepting.store(true);  // the table still says active: so does the volume
      return saved;
    }
  }
  return live;
}

Status Engine::SetVolumeCutoff(const std::string& name, std::optional<uint64_t> bytes) {
  Impl& im = *impl_;
  MutexLock lock(im.volume_mu);
  std::vector<VolumeRecord> table = im.volume_table;
  auto it = std::find_if(table.begin(), table.end(), [&](const VolumeRecord& r) { return r.name == name; });
  if (it == table.end()) return Status::NotFound("the cache has no volume named " + name);
  it->sequential_cutoff = bytes;
  const uint32_t id = it->id;
  CACHECORE_RETURN_IF_ERROR(im.SaveVolumeTable(std::move(table)));
  im.volumes.ById(id)->sequential_cutoff.store(bytes.value_or(kCacheCutoff));
  return Status::Ok();
}

std::vector<VolumeInfo> Engine::volumes() const {
  MutexLock lock(impl_->volume_mu);
  std::vector<VolumeInfo> out;
  for (const VolumeRecord& r : impl_->volume_table) out.push_back(InfoOf(r, impl_->volumes.ById(r.id)));
  return out;
}

Result<VolumeInfo> Engine::volume(const std::string& name) const {
  for (VolumeInfo& v : volumes()) {
    if (v.name == name) return v;
  }
  return Status::NotFound("the cache has no volume named " + name);
}

}  // namespace cachecore
