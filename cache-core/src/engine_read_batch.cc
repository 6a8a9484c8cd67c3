// The hit path of a read that spans several lines: when every block it
// touches is cached, one batch of cache reads (submitted together, so the
// device runs them in parallel) instead of one I/O per line. Anything else
// (a miss, a read error, a checksum that fails) leaves it to the
// line-by-line path, which handles all of that.
#include <algorithm>

#include "cachecore/checksum.h"
#include "engine_impl.h"

namespace cachecore {

namespace {

// The request's lines and where each lands in the caller's buffer; reused
// per thread, so the hot path allocates nothing after warm-up.
struct Batch {
  std::vector<Segment> segments;
  std::vector<uint64_t> at;  // byte offset of each segment in the request
  std::vector<uint32_t> slots;
  std::vector<size_t> stripes;
  std::vector<IoRequest> reads;
};

Batch& ThreadBatch() {
  thread_local Batch batch;
  batch.segments.clear();
  batch.at.clear();
  batch.slots.clear();
  batch.stripes.clear();
  batch.reads.clear();
  return batch;
}

}  // namespace

bool Engine::Impl::ReadAllHits(uint64_t offset, uint8_t* out, uint64_t length, Tally& tally) {
  // Only whole blocks into memory fit for direct I/O: the devices then read
  // straight into the caller's buffer.
  if (offset % kBlockSize || length % kBlockSize || reinterpret_cast<uintptr_t>(out) % kSectorSize) {
    return false;
  }
  if (offset / line_size == (offset + length - 1) / line_size) return false;  // one line: nothing to batch
  Batch& b = ThreadBatch();
  (void)ForEachSegment(offset, length, line_size, [&](const Segment& seg, uint64_t at) {
    b.segments.push_back(seg);
    b.at.push_back(at);
    b.stripes.push_back(StripeIndex(seg.line));
    return Status::Ok();
  });
  // Several stripes, taken in index order: two batched readers never wait
  // on each other in a cycle, and everyone else only try_locks a second one.
  std::sort(b.stripes.begin(), b.stripes.end());
  b.stripes.erase(std::unique(b.stripes.begin(), b.stripes.end()), b.stripes.end());
  for (size_t s : b.stripes) stripes[s].lock();
  bool all_hits = true;
  {
    std::lock_guard lock(mu);
    for (const Segment& seg : b.segments) {
      auto it = map.find(seg.line);
      if (it == map.end()) { all_hits = false; break; }
      for (uint32_t blk = seg.first_block(); blk < seg.end_block() && all_hits; ++blk) {
        all_hits = (Flags(it->second, blk) & kValid) != 0;
      }
      if (!all_hits) break;
      b.slots.push_back(it->second);
    }
  }
  bool ok = all_hits;
  if (ok) {
    for (size_t i = 0; i < b.segments.size(); ++i) {
      const Segment& seg = b.segments[i];
      uint64_t bytes = uint64_t{seg.end_block() - seg.first_block()} * kBlockSize;
      b.reads.push_back({IoOp::kRead, SlotOffset(b.slots[i], seg.first_block()), bytes, out + b.at[i], Status()});
    }
    ok = dev.cache->SubmitAndWait(b.reads).ok();
  }
  for (size_t i = 0; ok && i < b.segments.size(); ++i) {
    const Segment& seg = b.segments[i];
    for (uint32_t blk = seg.first_block(); blk < seg.end_block() && ok; ++blk) {
      const uint8_t* data = out + b.at[i] + uint64_t{blk - seg.first_block()} * kBlockSize;
      ok = Crc32c(data, kBlockSize) == block_crc[BlockIndex(b.slots[i], blk)];
    }
  }
  if (ok) {
    std::lock_guard lock(mu);
    for (uint32_t slot : b.slots) policy->OnHit(slot);
    for (const Segment& seg : b.segments) tally.hits += seg.end_block() - seg.first_block();
  }
  for (size_t s : b.stripes) stripes[s].unlock();
  return ok;
}

}  // namespace cachecore
