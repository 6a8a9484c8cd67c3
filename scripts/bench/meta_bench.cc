// cachectl-meta-bench: what the metadata costs, measured on the engine
// itself over real files (libaio, O_DIRECT) and a real RocksDB store.
//
//   cachectl-meta-bench fill --dir DIR --lines N [--overwrites M] [--no-flush]
//     creates a write-back cache of N 4 KiB lines, fills every line (1 MiB
//     writes), then makes M random 4 KiB writes in write-back and M in
//     write-through (with a flush of every dirty line between: its time is
//     reported too), and shuts down cleanly; prints JSON: resident memory
//     per line (all the cache costs the process, from before its files and
//     store are opened: the engine's tables made at create, the store's
//     memory, what filling adds; and the empty cache's share alone),
//     RocksDB bytes written per client write (bytes the process
//     passed to write(2): RocksDB's log, tables and compactions; the data
//     goes by io_submit and is not in that count), and the IOPS of both modes.
//     With --no-flush the flush and the write-through part are left out (the
//     origin then stays empty: the run needs half the disk space).
//   cachectl-meta-bench open --dir DIR
//     opens that cache warm in a fresh process; prints the time it took
//     (opening the store, with its log's replay, included; the store's open
//     alone too), the resident memory afterwards (from before anything was
//     opened) and the store's size on disk, per line.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "cachecore/devices/file_device.h"
#include "cachecore/engine/engine.h"
#include "cachecore/metadata/metadata_store.h"

using namespace cachecore;

namespace {

constexpr uint64_t kLine = 4096;
constexpr uint64_t kFillChunk = 1 << 20;

// A field of /proc/self/<file> ("VmRSS:" in status, "wchar:" in io).
uint64_t ProcField(const char* file, const std::string& field) {
  std::ifstream in(std::string("/proc/self/") + file);
  for (std::string key; in >> key;) {
    uint64_t value = 0;
    if (key == field && in >> value) return value;
  }
  return 0;
}
uint64_t RssBytes() { return ProcField("status", "VmRSS:") * 1024; }
uint64_t WrittenBytes() { return ProcField("io", "wchar:"); }

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "cachectl-meta-bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

struct Opened {
  std::unique_ptr<BlockDevice> origin, cache;
  std::unique_ptr<MetadataStore> store;
  EngineDevices devices() { return {origin.get(), cache.get(), store.get()}; }
};

Opened OpenFiles(const std::string& dir, bool create) {
  Opened o;
  auto origin = OpenFileDevice(dir + "/origin.img", {});
  if (!origin.ok()) Die("origin", origin.status());
  auto cache = OpenFileDevice(dir + "/cache.img", {});
  if (!cache.ok()) Die("cache", cache.status());
  MetadataOptions mo;
  mo.create_if_missing = create;
  auto store = MetadataStore::Open(dir + "/meta", mo);
  if (!store.ok()) Die("store", store.status());
  o.origin = std::move(origin.value());
  o.cache = std::move(cache.value());
  o.store = std::move(store.value());
  return o;
}

EngineConfig Config(CacheMode mode) {
  EngineConfig c;
  c.line_size = kLine;
  c.mode = mode;
  c.sequential_cutoff = 0;
  c.background_cleaner = false;
  return c;
}

// M random 4 KiB writes at queue depth 1: IOPS and write(2) bytes per write.
std::pair<double, double> RandomWrites(Engine& e, uint64_t lines, uint64_t count, uint8_t* block) {
  std::mt19937_64 rng(42);
  uint64_t written = WrittenBytes();
  auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    Status s = e.Write((rng() % lines) * kLine, block, kLine);
    if (!s.ok()) Die("random write", s);
  }
  double secs = Seconds(start);
  return {count / secs, double(WrittenBytes() - written) / count};
}

int Fill(const std::string& dir, uint64_t lines, uint64_t overwrites, bool flush) {
  for (auto [name, size] : {std::pair{"origin.img", lines * kLine},
                            std::pair{"cache.img", kDataOffset + lines * kLine}}) {
    std::ofstream(dir + "/" + name).close();
    if (truncate((dir + "/" + name).c_str(), static_cast<off_t>(size)) != 0) {
      Die(name, Status::IoError(std::strerror(errno)));
    }
  }
  AlignedBuffer chunk(kFillChunk);
  std::memset(chunk.data(), 0x5A, kFillChunk);
  const uint64_t rss_start = RssBytes();  // before the store and the engine's tables exist
  Opened o = OpenFiles(dir, true);
  auto created = Engine::Create(o.devices(), Config(CacheMode::kWriteBack), Replace::kNothing);
  if (!created.ok()) Die("create", created.status());
  Engine& e = **created;
  uint64_t rss_before = RssBytes(), written_before = WrittenBytes();
  auto start = std::chrono::steady_clock::now();
  for (uint64_t off = 0; off < lines * kLine; off += kFillChunk) {
    Status s = e.Write(off, chunk.data(), std::min(kFillChunk, lines * kLine - off));
    if (!s.ok()) Die("fill", s);
  }
  if (Status s = e.Sync(); !s.ok()) Die("sync", s);
  double fill_s = Seconds(start);
  uint64_t rss_after = RssBytes(), fill_written = WrittenBytes() - written_before;
  auto [wb_iops, wb_bytes] = RandomWrites(e, lines, overwrites, chunk.data());
  std::printf("{\"lines\": %lu, \"fill_seconds\": %.2f, \"rss_bytes_per_line\": %.1f, "
              "\"rss_bytes_per_line_empty\": %.1f, "
              "\"store_bytes_per_line_filled\": %.1f, \"writeback_4k_iops\": %.0f, "
              "\"writeback_store_bytes_per_write\": %.1f", lines, fill_s,
              double(rss_after - rss_start) / lines, double(rss_before - rss_start) / lines,
              double(fill_written) / lines, wb_iops, wb_bytes);
  if (flush) {
    start = std::chrono::steady_clock::now();
    if (Status s = e.Flush(); !s.ok()) Die("flush", s);
    double flush_s = Seconds(start);
    if (Status s = e.SetMode(CacheMode::kWriteThrough); !s.ok()) Die("mode", s);
    auto [wt_iops, wt_bytes] = RandomWrites(e, lines, overwrites, chunk.data());
    if (Status s = e.SetMode(CacheMode::kWriteBack); !s.ok()) Die("mode", s);
    std::printf(", \"writethrough_4k_iops\": %.0f, \"writethrough_store_bytes_per_write\": %.1f, "
                "\"flush_seconds\": %.2f", wt_iops, wt_bytes, flush_s);
  }
  std::printf("}\n");
  if (Status s = e.Shutdown(); !s.ok()) Die("shutdown", s);
  return 0;
}

uint64_t BytesUnder(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) total += entry.file_size();
  }
  return total;
}

int Open(const std::string& dir) {
  const uint64_t store_bytes = BytesUnder(dir + "/meta");
  const uint64_t rss_before = RssBytes();
  auto start = std::chrono::steady_clock::now();
  Opened o = OpenFiles(dir, false);
  const double store_open_s = Seconds(start);
  auto opened = Engine::Open(o.devices(), Config(CacheMode::kWriteBack));
  if (!opened.ok()) Die("open", opened.status());
  double open_s = Seconds(start);
  uint64_t lines = (*opened)->stats().occupancy_lines;
  std::printf("{\"lines\": %lu, \"open_seconds\": %.2f, \"store_open_seconds\": %.2f, "
              "\"rss_bytes_per_line\": %.1f, \"store_bytes_on_disk_per_line\": %.1f}\n",
              lines, open_s, store_open_s,
              double(RssBytes() - rss_before) / std::max<uint64_t>(lines, 1),
              double(store_bytes) / std::max<uint64_t>(lines, 1));
  return (*opened)->Shutdown().ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string verb = argc > 1 ? argv[1] : "", dir;
  uint64_t lines = 0, overwrites = 20000;
  bool flush = true;
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i], value = i + 1 < argc ? argv[i + 1] : "";
    if (flag == "--no-flush") flush = false;
    else if (flag == "--dir") dir = argv[++i];
    else if (flag == "--lines" && !value.empty()) lines = std::stoull(argv[++i]);
    else if (flag == "--overwrites" && !value.empty()) overwrites = std::stoull(argv[++i]);
    else lines = 0;  // unknown: the usage below
  }
  if (verb == "fill" && !dir.empty() && lines > 0) return Fill(dir, lines, overwrites, flush);
  if (verb == "open" && !dir.empty()) return Open(dir);
  std::fprintf(stderr, "usage: cachectl-meta-bench fill --dir DIR --lines N [--overwrites M] [--no-flush]\n"
                       "       cachectl-meta-bench open --dir DIR\n");
  return 2;
}
