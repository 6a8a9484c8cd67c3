#include "cachecore/planning/replay.h"

#include <rocksdb/env.h>

#include <cmath>
#include <cstring>
#include <unordered_set>

#include "cachecore/engine/engine.h"
#include "cachecore/devices/memory_device.h"
#include "cachecore/metadata/superblock.h"
#include "cachecore/planning/trace_reader.h"

namespace cachecore {

namespace {

constexpr uint64_t kBlock = 4096;

struct Footprint {
  uint64_t requests = 0;
  uint64_t blocks = 0;
  uint64_t end = 0;  // highest byte touched, rounded up to a block
};

Result<Footprint> MeasureFootprint(const std::string& path, TraceFormat format) {
  Result<std::unique_ptr<TraceReader>> reader = TraceReader::Open(path, format);
  if (!reader.ok()) return reader.status();
  std::unordered_set<uint64_t> blocks;
  Footprint fp;
  TraceRecord r;
  while (true) {
    Result<bool> more = reader.value()->Next(&r);
    if (!more.ok()) return more.status();
    if (!more.value()) break;
    ++fp.requests;
    if (r.length == 0) continue;
    uint64_t first = r.offset / kBlock, last = (r.offset + r.length - 1) / kBlock;
    for (uint64_t b = first; b <= last; ++b) blocks.insert(b);
    fp.end = std::max(fp.end, (last + 1) * kBlock);
  }
  fp.blocks = blocks.size();
  return fp;
}

}  // namespace

Result<CacheSize> ParseCacheSize(const std::string& text) {
  CacheSize size;
  if (!text.empty() && text.back() == '%') {
    char* end = nullptr;
    std::string number = text.substr(0, text.size() - 1);
    size.percent = std::strtod(number.c_str(), &end);
    if (number.empty() || *end != '\0' || !(size.percent > 0) || size.percent > 100) {
      return Status::InvalidArgument("cache size '" + text + "' is not a percentage in (0, 100]");
    }
    size.is_percent = true;
    return size;
  }
  Result<uint64_t> bytes = ParseSize(text);
  if (!bytes.ok()) return bytes.status();
  size.bytes = bytes.value();
  return size;
}

Result<ReplayResult> ReplayTrace(const ReplayOptions& o) {
  Result<Footprint> fp = MeasureFootprint(o.trace_path, o.format);
  if (!fp.ok()) return fp.status();
  if (fp->blocks == 0) return Status::InvalidArgument(o.trace_path + " holds no requests");
  uint64_t cache_bytes = o.cache_size.is_percent
      ? static_cast<uint64_t>(std::floor(fp->blocks * o.cache_size.percent / 100.0)) * kBlock
      : o.cache_size.bytes;
  uint64_t lines = cache_bytes / o.line_size;
  if (lines < 2) {
    return Status::InvalidArgument("a cache of " + std::to_string(cache_bytes) +
                                   " bytes holds fewer than two lines of " +
                                   std::to_string(o.line_size) + " bytes");
  }
  uint64_t origin_size = (fp->end + o.line_size - 1) / o.line_size * o.line_size;
  auto origin = NewMemoryDevice(origin_size, "replay-origin");
  auto cache = NewMemoryDevice(kDataOffset + lines * o.line_size, "replay-cache");
  std::unique_ptr<rocksdb::Env> env(rocksdb::NewMemEnv(rocksdb::Env::Default()));
  MetadataOptions mo;
  mo.create_if_missing = true;
  mo.env = env.get();
  Result<std::unique_ptr<MetadataStore>> store = MetadataStore::Open("/replay-metadata", mo);
  if (!store.ok()) return store.status();

  EngineConfig config;
  config.line_size = o.line_size;
  config.mode = o.mode;
  config.sequential_cutoff = o.sequential_cutoff;
  config.policy = o.policy;
  config.promote_after_hits = o.promote_after_hits;
  config.ram_cache_bytes = o.ram_cache_bytes;
  config.background_cleaner = false;  // the run is deterministic
  ReplayResult result;
  {
    Result<std::unique_ptr<Engine>> engine =
        Engine::Create({origin.get(), cache.get(), store->get()}, config, Replace::kNothing);
    if (!engine.ok()) return engine.status();
    Result<std::unique_ptr<TraceReader>> reader = TraceReader::Open(o.trace_path, o.format);
    if (!reader.ok()) return reader.status();
    AlignedBuffer buffer;
    TraceRecord r;
    while (true) {
      Result<bool> more = reader.value()->Next(&r);
      if (!more.ok()) return more.status();
      if (!more.value()) break;
      if (r.length == 0) continue;
      uint64_t begin = r.offset / kBlock * kBlock;
      uint64_t end = (r.offset + r.length + kBlock - 1) / kBlock * kBlock;
      buffer.Reserve(end - begin);
      Status s = r.is_write ? engine.value()->Write(begin, buffer.data(), end - begin)
                            : engine.value()->Read(begin, buffer.data(), end - begin);
      if (!s.ok()) return s;
    }
    result.stats = engine.value()->stats();
    CACHECORE_RETURN_IF_ERROR(engine.value()->Shutdown());
  }
  result.requests = fp->requests;
  result.footprint_blocks = fp->blocks;
  result.cache_lines = lines;
  result.accesses = result.stats.read_hits + result.stats.read_misses + result.stats.write_hits +
                    result.stats.write_misses;
  return result;
}

}  // namespace cachecore
