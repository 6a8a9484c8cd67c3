// engine_demo: the main job end to end on real files or devices through
// libaio: attach (format) a write-back cache, run a skewed random workload,
// print the statistics, flush with progress, detach, and verify that the
// origin alone holds every byte written. Used by scripts/demo.sh.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cachecore/aio_device.h"
#include "cachecore/engine.h"
#include "support/block_io.h"

using namespace cachecore;

namespace {

int Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "engine_demo: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

void PrintStats(const StatsSnapshot& s) {
  std::printf("  read hit ratio   %.3f (%llu hits, %llu misses, 4 KiB blocks)\n", s.read_hit_ratio(),
              (unsigned long long)s.read_hits, (unsigned long long)s.read_misses);
  std::printf("  hit ratio        %.3f\n", s.hit_ratio());
  std::printf("  lines            %llu of %llu used, %llu dirty\n",
              (unsigned long long)s.occupancy_lines, (unsigned long long)s.capacity_lines,
              (unsigned long long)s.dirty_lines);
  std::printf("  promotions %llu, evictions %llu, cleaner writes %llu, errors %llu\n",
              (unsigned long long)s.promotions, (unsigned long long)s.evictions,
              (unsigned long long)s.cleaner_writes,
              (unsigned long long)(s.errors.cache_read + s.errors.cache_write +
                                   s.errors.origin_read + s.errors.origin_write));
}

}  // namespace

int main(int argc, char** argv) {
  std::string origin_path, cache_path, meta_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--origin") origin_path = argv[i + 1];
    else if (k == "--cache") cache_path = argv[i + 1];
    else if (k == "--metadata") meta_path = argv[i + 1];
  }
  if (origin_path.empty() || cache_path.empty() || meta_path.empty()) {
    std::fprintf(stderr, "usage: engine_demo --origin PATH --cache PATH --metadata DIR\n");
    return 2;
  }
  auto origin = OpenAioDevice(origin_path);
  if (!origin.ok()) return Die("origin", origin.status());
  auto cache = OpenAioDevice(cache_path);
  if (!cache.ok()) return Die("cache", cache.status());
  MetadataOptions mo;
  mo.create_if_missing = true;
  auto store = MetadataStore::Open(meta_path, mo);
  if (!store.ok()) return Die("metadata", store.status());
  EngineConfig config;
  config.mode = CacheMode::kWriteBack;
  config.line_size = 64 * 1024;
  auto engine = Engine::Create({origin->get(), cache->get(), store->get()}, config, false);
  if (!engine.ok()) return Die("attach", engine.status());
  Engine& e = *engine.value();
  std::printf("attached %s to %s: cache %s, %llu lines of 64 KiB, write-back\n",
              cache_path.c_str(), origin_path.c_str(), UuidToString(e.identity().uuid).c_str(),
              (unsigned long long)e.capacity_lines());
  std::printf("  (write-back: written data lives only on the cache until it is flushed)\n");

  const uint64_t blocks = origin->get()->size_bytes() / 4096;
  std::vector<uint32_t> tags(blocks, 0);
  std::mt19937_64 rng(42);
  const uint64_t hot = std::max<uint64_t>(blocks / 50, 64);
  AlignedBuffer buf(64 * 1024);
  for (uint32_t op = 1; op <= 20000; ++op) {
    uint64_t n = 1 + rng() % 16;
    uint64_t first = (rng() % 10 < 8 ? rng() % hot : rng() % blocks);
    first = std::min(first, blocks - n);
    if (rng() % 10 < 3) {
      cachecore::testing::FillPattern(buf.data(), first * 4096, n * 4096, op);
      Status s = e.Write(first * 4096, buf.data(), n * 4096);
      if (!s.ok()) return Die("write", s);
      for (uint64_t b = first; b < first + n; ++b) tags[b] = op;
    } else {
      Status s = e.Read(first * 4096, buf.data(), n * 4096);
      if (!s.ok()) return Die("read", s);
    }
  }
  std::printf("ran 20000 requests (70 %% reads, 80 %% of them on a hot 2 %%)\n");
  PrintStats(e.stats());
  Status flushed = e.Flush([](uint64_t left, uint64_t total) {
    std::printf("\r  flushing: %llu of %llu dirty lines left   ", (unsigned long long)left,
                (unsigned long long)total);
    std::fflush(stdout);
  });
  std::printf("\n");
  if (!flushed.ok()) return Die("flush", flushed);
  Status detached = e.Detach();
  if (!detached.ok()) return Die("detach", detached);
  std::printf("detached: the origin alone holds the data\n");

  uint64_t checked = 0;
  AlignedBuffer got(4096), want(4096);
  for (uint64_t b = 0; b < blocks; ++b) {
    if (tags[b] == 0) continue;
    if (!origin->get()->Read(b * 4096, got.data(), 4096).ok()) return Die("verify", Status::IoError("read"));
    cachecore::testing::FillPattern(want.data(), b * 4096, 4096, tags[b]);
    if (std::memcmp(got.data(), want.data(), 4096) != 0) {
      std::fprintf(stderr, "engine_demo: block %llu on the origin is wrong\n", (unsigned long long)b);
      return 1;
    }
    ++checked;
  }
  std::printf("verified %llu written blocks on the origin\n", (unsigned long long)checked);
  return 0;
}
