// The engine's use of its RAM tier (engine/ram_tier.h): reads served from
// it, proven cache hits filling it, and changes forgetting it, each under
// the stripes of the lines concerned.
#include "cachecore/engine/steps.h"
#include "engine/engine_async.h"

namespace cachecore {

bool Engine::Impl::ServedFromRam(AsyncHit& hit) {
  if (!ram.on()) return false;
  uint8_t* to = hit.out;
  for (const Segment& seg : hit.segments) {
    if (!ram.Read(seg.line, seg.first_block(), seg.end_block(), to)) return false;
    to += uint64_t{seg.end_block() - seg.first_block()} * kBlockSize;
  }
  // The cache's policy sees the hit too: a block hot in RAM stays cached
  // below it, where it goes when the tier lets go of it.
  hit.slots.clear();
  slots.FindEach(hit.segments.size(), [&hit](size_t i) { return hit.segments[i].line; }, hit.slots);
  slots.NoteHits(hit.slots);
  ReleaseStripes(hit.stripes, false);
  const uint64_t blocks = hit.length / kBlockSize;
  LiveStats::Bump(stats.ram_hits, blocks);
  CountReads({blocks, 0}, hit.offset);
  EngineCompletion* done = hit.done;
  async->hits.Give(std::unique_ptr<AsyncHit>(&hit));
  Answer(done, Status::Ok());
  return true;
}

void Engine::Impl::FillRam(const AsyncHit& hit) {
  if (!ram.on() || hit.bypass) return;  // a stream past the cutoff is no sign of heat
  ReachedStep("ram-1-filling");  // a test point: a write to these lines waits
  const uint8_t* from = hit.out;
  for (const Segment& seg : hit.segments) {
    ram.Fill(seg.line, seg.first_block(), seg.end_block(), from);
    from += uint64_t{seg.end_block() - seg.first_block()} * kBlockSize;
  }
}

void Engine::Impl::ForgetInRam(std::span<const Segment> segments) {
  if (!ram.on()) return;
  for (const Segment& seg : segments) ram.Forget(seg.line, seg.first_block(), seg.end_block());
}

}  // namespace cachecore
