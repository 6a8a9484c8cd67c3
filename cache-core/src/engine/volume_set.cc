#include "engine/volume_set.h"

#include <algorithm>

namespace cachecore {

void VolumeCounters::ResetAccessCounters() {
  for (std::atomic<uint64_t>* c : {&read_hits, &read_misses, &write_hits, &write_misses,
                                   &read_requests, &write_requests, &read_bytes, &write_bytes}) {
    c->store(0, std::memory_order_relaxed);
  }
}

VolumeSet::~VolumeSet() = default;

LiveVolume* VolumeSet::Publish(uint32_t id, uint64_t base, BlockDevice* origin) {
  auto volume = std::make_unique<LiveVolume>(id, base, origin->size_bytes(), origin);
  LiveVolume* raw = volume.get();
  {
    std::lock_guard<std::mutex> lock(retired_mu_);
    owned_.push_back(std::move(volume));
  }
  volumes_[id].store(raw, std::memory_order_release);
  UpdateEnd();
  return raw;
}

void VolumeSet::Withdraw(uint32_t id) {
  std::unique_lock flushes(flush_mu_);  // waits for flushes that may hold the volume
  volumes_[id].store(nullptr, std::memory_order_release);
  UpdateEnd();
}

void VolumeSet::UpdateEnd() {
  uint64_t end = 0;
  for (const LiveVolume* v : All()) end = std::max(end, v->base + v->size);
  end_.store(end, std::memory_order_release);
}

LiveVolume* VolumeSet::Find(uint64_t offset, uint64_t length) const {
  for (const auto& slot : volumes_) {
    LiveVolume* v = slot.load(std::memory_order_acquire);
    if (v != nullptr && v->Contains(offset, length)) return v;
  }
  return nullptr;
}

std::vector<LiveVolume*> VolumeSet::All() const {
  std::vector<LiveVolume*> out;
  for (const auto& slot : volumes_) {
    if (LiveVolume* v = slot.load(std::memory_order_acquire)) out.push_back(v);
  }
  return out;
}

uint64_t VolumeSet::FreeBase(uint64_t size, uint64_t alignment) const {
  std::vector<LiveVolume*> by_base = All();
  std::sort(by_base.begin(), by_base.end(),
            [](const LiveVolume* a, const LiveVolume* b) { return a->base < b->base; });
  auto round_up = [alignment](uint64_t x) { return (x + alignment - 1) / alignment * alignment; };
  uint64_t candidate = 0;
  for (const LiveVolume* v : by_base) {
    if (candidate + size + alignment <= v->base) return candidate;  // fits before v, a gap after
    candidate = std::max(candidate, round_up(v->base + v->size) + alignment);
  }
  return candidate;
}

uint32_t VolumeSet::FreeId() const {
  for (uint32_t id = 0; id < kMaxVolumes; ++id) {
    if (ById(id) == nullptr) return id;
  }
  return kMaxVolumes;
}

std::string VolumeSet::identity() const {
  std::string out;
  for (const LiveVolume* v : All()) out += (out.empty() ? "" : ", ") + v->origin->identity();
  return out;
}

bool VolumeSet::supports_discard() const {
  for (const LiveVolume* v : All()) {
    if (v->origin->supports_discard()) return true;
  }
  return false;
}

bool VolumeSet::discards_without_waiting() const {
  std::vector<LiveVolume*> all = All();
  return !all.empty() && std::all_of(all.begin(), all.end(), [](const LiveVolume* v) {
    return v->origin->discards_without_waiting();
  });
}

Status VolumeSet::FlushAll() {
  std::shared_lock flushing(flush_mu_);
  Status first;
  for (const LiveVolume* v : All()) {
    Status s = v->origin->Flush();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

// A run of requests to one volume, moved to its offsets and back.
Status VolumeSet::SubmitRun(LiveVolume* volume, std::span<IoRequest> run) {
  for (IoRequest& r : run) r.offset -= volume->base;
  Status s = volume->origin->SubmitAndWait(run);
  for (IoRequest& r : run) r.offset += volume->base;
  return s;
}

Status VolumeSet::SubmitAndWait(std::span<IoRequest> requests) {
  Status first;
  auto note = [&first](const Status& s) {
    if (first.ok() && !s.ok()) first = s;
  };
  size_t i = 0;
  while (i < requests.size()) {
    IoRequest& r = requests[i];
    if (r.op == IoOp::kFlush) {
      r.status = FlushAll();
      note(r.status);
      ++i;
      continue;
    }
    LiveVolume* volume = Find(r.offset, r.length);
    if (volume == nullptr) {
      r.status = Status::OutOfRange("request at " + std::to_string(r.offset) + " lies in no volume");
      note(r.status);
      ++i;
      continue;
    }
    size_t end = i + 1;  // the run of requests within the same volume
    while (end < requests.size() && requests[end].op != IoOp::kFlush &&
           volume->Contains(requests[end].offset, requests[end].length)) {
      ++end;
    }
    note(SubmitRun(volume, requests.subspan(i, end - i)));
    i = end;
  }
  return first;
}

void VolumeSet::Submit(AsyncIo& io) {
  if (io.request.op == IoOp::kFlush) return BlockDevice::Submit(io);  // every origin, here
  LiveVolume* volume = Find(io.request.offset, io.request.length);
  if (volume == nullptr) {
    io.request.status =
        Status::OutOfRange("request at " + std::to_string(io.request.offset) + " lies in no volume");
    return io.done->IoDone(io);
  }
  if (volume->base == 0) return volume->origin->Submit(io);  // nothing to move
  io.routed_done = io.done;
  io.routed_base = volume->base;
  io.request.offset -= volume->base;
  io.done = &restore_;
  volume->origin->Submit(io);
}

void VolumeSet::Restore::IoDone(AsyncIo& io) {
  io.request.offset += io.routed_base;
  io.done = io.routed_done;
  io.routed_done = nullptr;
  io.done->IoDone(io);
}

}  // namespace cachecore
