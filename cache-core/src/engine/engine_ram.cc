// The engine's use of its RAM tier (engine/ram_tier.h): reads served from
// it, proven cache hits filling it, and changes forgetting it, each under
// the stripes of the lines concerned.
#include "cachecore/engine/steps.h"
#include "engine/engine_async.h"

namespace cachecore {

// Copies what the tier holds of the hit: the whole request as one range
// (small lines would otherwise cost a lock and a stalled copy per line),
// then, from the segment where that stopped, a whole segment at a time;
// the segments it lacks are read from the cache (hit.in_ram,
// hit.from_cache).
bool Engine::Impl::ServedFromRam(AsyncHit& hit) {
  hit.in_ram.clear();
  hit.ram_blocks = 0;
  if (!ram.on()) return false;
  const uint64_t blocks = hit.length / kBlockSize;
  const uint64_t copied = ram.ReadBlocks(hit.offset / kBlockSize, hit.offset / kBlockSize + blocks, hit.out);
  if (copied == blocks) return AnswerFromRam(hit);
  if (hit.segments.size() == 1) return false;  // that one segment is not all there
  hit.in_ram.assign(hit.segments.size(), 0);
  uint64_t at = 0;  // blocks of the request before segment i
  for (size_t i = 0; i < hit.segments.size(); ++i) {
    const Segment& seg = hit.segments[i];
    const uint32_t n = seg.end_block() - seg.first_block();
    if (at + n <= copied || ram.Read(seg.line, seg.first_block(), seg.end_block(), hit.out + at * kBlockSize)) {
      hit.in_ram[i] = 1;
      hit.ram_blocks += n;
    }
    at += n;
  }
  if (hit.ram_blocks < blocks) {
    if (hit.ram_blocks > 0) MarkReadFromCache(hit);
    return false;
  }
  return AnswerFromRam(hit);
}

// Every block copied from the tier: the stripes go, the hit is counted
// and answered.
bool Engine::Impl::AnswerFromRam(AsyncHit& hit) {
  const uint64_t blocks = hit.length / kBlockSize;
  // The cache's policy sees the hit too: a block hot in RAM stays cached
  // below it, where it goes when the tier lets go of it.
  hit.slots.clear();
  slots.FindEach(hit.segments.size(), [&hit](size_t i) { return hit.segments[i].line; }, hit.slots);
  slots.NoteHits(hit.slots);
  ReleaseStripes(hit.stripes, false);
  LiveStats::Bump(stats.ram_hits, blocks);
  CountReads({blocks, 0}, hit.offset);
  EngineCompletion* done = hit.done;
  async->hits.Give(std::unique_ptr<AsyncHit>(&hit));
  Answer(done, Status::Ok());
  return true;
}

void Engine::Impl::MarkReadFromCache(AsyncHit& hit) {
  hit.from_cache.clear();
  for (size_t i = 0; i < hit.segments.size(); ++i) {
    const Segment& seg = hit.segments[i];
    hit.from_cache.insert(hit.from_cache.end(), seg.end_block() - seg.first_block(), hit.InRam(i) ? 0 : 1);
  }
}

void Engine::Impl::FillRam(const AsyncHit& hit) {
  if (!ram.on() || hit.bypass) return;  // a stream past the cutoff is no sign of heat
  ReachedStep("ram-1-filling");  // a test point: a write to these lines waits
  const uint8_t* from = hit.out;
  for (size_t i = 0; i < hit.segments.size(); ++i) {
    const Segment& seg = hit.segments[i];
    if (!hit.InRam(i)) ram.Fill(seg.line, seg.first_block(), seg.end_block(), from);
    from += uint64_t{seg.end_block() - seg.first_block()} * kBlockSize;
  }
}

void Engine::Impl::FillRam(const AsyncMiss& miss) {
  if (!ram.on() || miss.bypass) return;
  ReachedStep("ram-1-filling");
  size_t block = 0;  // among the request's blocks
  for (const Segment& seg : miss.segments) {
    // Each run of blocks read from the cache, in one fill.
    for (uint32_t b = seg.first_block(); b < seg.end_block();) {
      if (!miss.cached[block]) {
        ++b, ++block;
        continue;
      }
      const uint32_t first = b;
      const uint8_t* from = miss.out + block * kBlockSize;
      while (b < seg.end_block() && miss.cached[block]) ++b, ++block;
      ram.Fill(seg.line, first, b, from);
    }
  }
}

void Engine::Impl::ForgetInRam(std::span<const Segment> segments) {
  if (!ram.on()) return;
  for (const Segment& seg : segments) ram.Forget(seg.line, seg.first_block(), seg.end_block());
}

}  // namespace cachecore
