#include "cachecore/planning/advise.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <queue>
#include <thread>
#include <unordered_map>

#include "cachecore/policy/eviction_policy.h"

namespace cachecore {

namespace {

constexpr uint64_t kBlock = 4096;

uint32_t BlockHash(uint64_t block) {
  uint64_t h = block * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  return static_cast<uint32_t>(h >> 32);
}

// The sampled trace: each access as a dense block id, the write bit on top.
struct Sample {
  std::vector<uint32_t> accesses;
  std::vector<uint64_t> block_of_id;  // original block number of each dense id
  uint64_t requests = 0, accesses_total = 0;
  uint64_t threshold = 1ull << 32;  // blocks with hash < threshold are in the sample
};
constexpr uint32_t kWriteBit = 1u << 31;

// Reads the trace once, keeping the accesses of sampled blocks. When the
// sample outgrows `max_blocks`, the threshold drops to the largest hash
// kept (that block leaves); accesses of blocks above the final threshold
// are filtered out at the end.
Result<Sample> ReadSample(const AdviseOptions& o) {
  Result<std::unique_ptr<TraceReader>> reader = TraceReader::Open(o.trace_path, o.format);
  if (!reader.ok()) return reader.status();
  Sample s;
  std::unordered_map<uint64_t, uint32_t> id_of;
  std::priority_queue<std::pair<uint32_t, uint64_t>> largest;  // (hash, block) in the sample
  std::vector<uint32_t> raw;
  TraceRecord r;
  while (true) {
    Result<bool> more = reader.value()->Next(&r);
    if (!more.ok()) return more.status();
    if (!more.value()) break;
    ++s.requests;
    if (r.length == 0) continue;
    for (uint64_t b = r.offset / kBlock, last = (r.offset + r.length - 1) / kBlock; b <= last; ++b) {
      ++s.accesses_total;
      uint32_t h = BlockHash(b);
      if (h >= s.threshold) continue;
      auto [it, added] = id_of.try_emplace(b, static_cast<uint32_t>(s.block_of_id.size()));
      if (added) {
        s.block_of_id.push_back(b);
        largest.emplace(h, b);
        if (largest.size() > o.max_sampled_blocks) {
          s.threshold = largest.top().first;
          largest.pop();
          if (h >= s.threshold) continue;
        }
      }
      raw.push_back(it->second | (r.is_write ? kWriteBit : 0));
    }
  }
  // Keep the accesses of blocks under the final threshold, renumbered densely.
  std::vector<uint32_t> renumber(s.block_of_id.size(), UINT32_MAX);
  std::vector<uint64_t> kept_blocks;
  for (uint32_t a : raw) {
    uint32_t id = a & ~kWriteBit;
    if (BlockHash(s.block_of_id[id]) >= s.threshold) continue;
    if (renumber[id] == UINT32_MAX) {
      renumber[id] = static_cast<uint32_t>(kept_blocks.size());
      kept_blocks.push_back(s.block_of_id[id]);
    }
    s.accesses.push_back(renumber[id] | (a & kWriteBit));
  }
  s.block_of_id = std::move(kept_blocks);
  return s;
}

struct Counts {
  uint64_t hits = 0, read_hits = 0, reads = 0, ram_hits = 0;
};

// The RAM tier above the simulated cache (engine/ram_tier.h), as one shard:
// S3-FIFO over `frames` blocks, filled by reads the cache hit, forgotten by
// writes.
class RamLayer {
 public:
  RamLayer(const Sample& s, uint64_t frames)
      : s_(s), frame_of_(frames == 0 ? 0 : s.block_of_id.size(), -1), id_in_frame_(frames), frames_(frames) {
    if (frames_ == 0) return;
    policy_ = NewS3FifoPolicy(static_cast<uint32_t>(frames_), /*promote_after=*/1,
                              [this](uint32_t frame) { return s_.block_of_id[id_in_frame_[frame]]; });
  }
  bool Read(uint32_t id) {
    if (frames_ == 0 || frame_of_[id] < 0) return false;
    policy_->OnHit(static_cast<uint32_t>(frame_of_[id]));
    return true;
  }
  void Fill(uint32_t id) {
    if (frames_ == 0) return;
    uint32_t frame;
    if (!free_.empty()) {
      frame = free_.back();
      free_.pop_back();
    } else if (used_ < frames_) {
      frame = static_cast<uint32_t>(used_++);
    } else {
      frame = *policy_->PickVictim(s_.block_of_id[id], [](uint32_t) { return true; }, UINT64_MAX, UINT64_MAX);
      policy_->OnRemove(frame);
      frame_of_[id_in_frame_[frame]] = -1;
    }
    frame_of_[id] = static_cast<int32_t>(frame);
    id_in_frame_[frame] = id;
    policy_->OnInsert(frame, s_.block_of_id[id]);
  }
  void Forget(uint32_t id) {
    if (frames_ == 0 || frame_of_[id] < 0) return;
    const uint32_t frame = static_cast<uint32_t>(frame_of_[id]);
    policy_->OnRemove(frame);
    frame_of_[id] = -1;
    free_.push_back(frame);
  }

 private:
  const Sample& s_;
  std::vector<int32_t> frame_of_;
  std::vector<uint32_t> id_in_frame_, free_;
  uint64_t frames_, used_ = 0;
  std::unique_ptr<EvictionPolicy> policy_;
};

// The engine's policy at `lines` lines over the sample: a hit tells the
// policy; a miss allocates (writes too, as in write-back), evicting the
// policy's victim when full. With `ram_frames`, a RAM tier above it serves
// the reads it holds (the cache's policy sees them as hits too, as the
// engine's does).
Counts Simulate(const Sample& s, uint64_t lines, PolicyKind kind, uint32_t promote_after, uint64_t ram_frames) {
  Counts c;
  RamLayer ram(s, ram_frames);
  std::vector<int32_t> slot_of(s.block_of_id.size(), -1);
  std::vector<uint32_t> id_in_slot(lines);
  auto policy = NewEvictionPolicy(kind, static_cast<uint32_t>(lines), promote_after,
                                  [&](uint32_t slot) { return s.block_of_id[id_in_slot[slot]]; });
  uint32_t used = 0;
  auto always = [](uint32_t) { return true; };
  for (uint32_t a : s.accesses) {
    uint32_t id = a & ~kWriteBit;
    bool read = !(a & kWriteBit);
    c.reads += read;
    const bool ram_hit = read && ram.Read(id);
    c.ram_hits += ram_hit;
    if (!read) ram.Forget(id);
    if (slot_of[id] >= 0) {
      policy->OnHit(static_cast<uint32_t>(slot_of[id]));
      ++c.hits;
      c.read_hits += read;
      if (read && !ram_hit) ram.Fill(id);
      continue;
    }
    if (ram_hit) {  // the cache let go of it, the RAM tier still has it
      ++c.hits;
      ++c.read_hits;
      continue;
    }
    uint32_t slot = used;
    if (used < lines) {
      ++used;
    } else {
      slot = *policy->PickVictim(s.block_of_id[id], always, UINT64_MAX, UINT64_MAX);
      policy->OnRemove(slot);
      slot_of[id_in_slot[slot]] = -1;
    }
    slot_of[id] = static_cast<int32_t>(slot);
    id_in_slot[slot] = id;
    policy->OnInsert(slot, s.block_of_id[id]);
  }
  return c;
}

}  // namespace

Result<AdviseResult> AdviseCacheSize(const AdviseOptions& o) {
  Result<Sample> sample = ReadSample(o);
  if (!sample.ok()) return sample.status();
  const Sample& s = sample.value();
  if (s.accesses.empty()) return Status::InvalidArgument(o.trace_path + " holds no requests");
  AdviseResult result;
  result.requests = s.requests;
  result.accesses = s.accesses_total;
  result.sampling_rate = static_cast<double>(s.threshold) / 4294967296.0;
  result.footprint_blocks = static_cast<uint64_t>(std::llround(s.block_of_id.size() / result.sampling_rate));
  result.curve.resize(100);
  // Sizes as `cachectl replay` takes them: floor(footprint x pct), in 4 KiB lines.
  std::atomic<uint32_t> next{1};
  auto work = [&] {
    for (uint32_t pct = next++; pct <= 100; pct = next++) {
      uint64_t lines = result.footprint_blocks * pct / 100;
      uint64_t sampled = std::llround(lines * result.sampling_rate);
      const uint64_t ram_frames = std::llround(o.ram_cache_bytes / kBlock * result.sampling_rate);
      Counts c = sampled > 0 ? Simulate(s, sampled, o.policy, o.promote_after_hits, ram_frames) : Counts{};  // no cache: no hits
      CurvePoint& p = result.curve[pct - 1];
      p.size_pct = pct;
      p.cache_bytes = lines * kBlock;
      p.hit_ratio = static_cast<double>(c.hits) / s.accesses.size();
      p.read_hit_ratio = c.reads ? static_cast<double>(c.read_hits) / c.reads : 0;
      p.ram_hit_ratio = c.reads ? static_cast<double>(c.ram_hits) / c.reads : 0;
    }
  };
  std::vector<std::thread> threads(std::max(1u, std::min(4u, std::thread::hardware_concurrency())));
  for (auto& t : threads) t = std::thread(work);
  for (auto& t : threads) t.join();
  double best = 0;
  for (const CurvePoint& p : result.curve) best = std::max(best, p.hit_ratio);
  for (const CurvePoint& p : result.curve) {
    if (p.hit_ratio >= o.target_share * best) {
      result.recommended_size_pct = p.size_pct;
      break;
    }
  }
  return result;
}

}  // namespace cachecore
