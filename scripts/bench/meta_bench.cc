// cachectl-meta-bench: what the metadata costs, measured on the engine
// itself over real files (libaio, O_DIRECT) and a real RocksDB store.
//
//   cachectl-meta-bench fill --dir DIR --lines N [--overwrites M] [--no-flush] [--crash]
//     creates a write-back cache of N 4 KiB lines over an origin of 4 N
//     lines (sparse: never written), and
//       1. fills every line by reading the origin's first N lines (1 MiB
//          reads; the lines are clean),
//       2. churns: reads the next 2 N lines, so each line is evicted and
//          the policy's ghost fills,
//       3. writes the last N lines it read, which the cache then holds but
//          for a few the ghost's false matches kept in main instead (1 MiB
//          writes, write-back: every line it holds dirty, but for about
//          0.1 % with the adaptive policy's 12-bit ghost) and syncs,
//       4. makes M random 4 KiB writes over those lines in write-back,
//       5. unless --no-flush, flushes every dirty line (its time reported)
//          and makes M random 4 KiB writes in write-through,
//     then shuts down cleanly, or with --crash ends the process without a
//     shutdown after step 3's measurement, its lines written again and
//     synced (every line dirty, the store's log full). Prints JSON:
//     resident memory per line after steps 1 and 3 (from before the files
//     and store are opened, after a 64-line cache was made, used and
//     removed so that the libraries' code pages and the allocator's arenas
//     are not counted as the lines'; with RocksDB's memtables written out
//     and freed heap returned first; its block cache taken out: the
//     memtables as they were and the block cache are reported apart with
//     their caps),
//     the empty cache's share, RocksDB bytes written per client write
//     (bytes the process passed to write(2): RocksDB's log, tables and
//     compactions; the data goes by io_submit and is not in that count), and
//     the IOPS of both modes.
//   cachectl-meta-bench open --dir DIR
//     opens that cache warm in a fresh process and shuts it down cleanly;
//     prints the time the start took (opening the store, with its log's
//     replay, included; the store's open alone too), whether the last
//     shutdown was clean and whether the start copied the slot table from
//     its snapshot, the resident memory afterwards (as above), and the
//     store's size on disk and the snapshot's, per line.
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "cachecore/base/process_memory.h"
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
// Heap freed (RocksDB's flushed memtables among it) is returned first: what
// stays resident is what is in use.
uint64_t RssBytes() {
  malloc_trim(0);
  return ProcField("status", "VmRSS:") * 1024;
}

// RocksDB's memtables and block cache, bounded by their caps whatever the
// cache's size: taken out of the engine's figure, reported apart.
uint64_t StoreBytes(MetadataStore& store) {
  const MetadataStore::Memory m = store.MemoryUsage();
  return m.memtables + m.block_cache;
}

// As the run left them, before a measurement writes the memtables out.
void PrintStoreMemory(const MetadataStore::Memory& m) {
  std::printf(", \"rocksdb_memtable_bytes\": %lu, \"rocksdb_memtable_cap_bytes\": %lu, "
              "\"rocksdb_block_cache_bytes\": %lu, \"rocksdb_block_cache_cap_bytes\": %lu",
              m.memtables, m.memtables_cap, m.block_cache, m.block_cache_cap);
}
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
  mo.defer_compactions = !create;  // as the daemon opens a store it starts from
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

// M random 4 KiB writes at queue depth 1 over lines [first, first +
// lines): IOPS and write(2) bytes per write.
std::pair<double, double> RandomWrites(Engine& e, uint64_t first, uint64_t lines, uint64_t count,
                                       uint8_t* block) {
  std::mt19937_64 rng(42);
  uint64_t written = WrittenBytes();
  auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    Status s = e.Write((first + rng() % lines) * kLine, block, kLine);
    if (!s.ok()) Die("random write", s);
  }
  double secs = Seconds(start);
  return {count / secs, double(WrittenBytes() - written) / count};
}

// Lines [first, end) in 1 MiB requests.
void Sweep(Engine& e, bool write, uint64_t first, uint64_t end, uint8_t* chunk) {
  for (uint64_t off = first * kLine; off < end * kLine; off += kFillChunk) {
    const uint64_t n = std::min(kFillChunk, end * kLine - off);
    Status s = write ? e.Write(off, chunk, n) : e.Read(off, chunk, n);
    if (!s.ok()) Die(write ? "fill write" : "fill read", s);
  }
}

double PerLine(uint64_t bytes, uint64_t lines) { return double(bytes) / std::max<uint64_t>(lines, 1); }

// Resident growth since `start`, RocksDB's own memory taken out (signed:
// small caches can come out below zero by the heap's noise). The
// memtables are written out first (their arenas freed, and the vector
// memtable's entry pointers, which RocksDB does not count), once RocksDB
// has no flush or compaction running (their buffers come and go): what
// RocksDB still holds then is its block cache, under its cap.
int64_t EngineBytes(uint64_t start, MetadataStore& store) {
  if (Status s = store.FlushMemtables(); !s.ok()) Die("writing the memtables out", s);
  for (int i = 0; i < 60000 && store.BackgroundWorkRunning(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return static_cast<int64_t>(RssBytes()) - static_cast<int64_t>(StoreBytes(store)) - static_cast<int64_t>(start);
}
double PerLine(int64_t bytes, uint64_t lines) { return double(bytes) / std::max<uint64_t>(lines, 1); }

void MakeFiles(const std::string& dir, uint64_t lines, uint64_t origin_factor) {
  for (auto [name, size] : {std::pair{"origin.img", origin_factor * lines * kLine},
                            std::pair{"cache.img", kDataOffset + lines * kLine}}) {
    std::ofstream(dir + "/" + name).close();
    if (truncate((dir + "/" + name).c_str(), static_cast<off_t>(size)) != 0) {
      Die(name, Status::IoError(std::strerror(errno)));
    }
  }
}

// What the process pays once, whatever the cache's size: the pages of the
// libraries' code it runs (RocksDB's alone is megabytes), their static
// tables, the allocator's arenas. A cache of 64 lines is made, used, shut
// down and removed first, so that the figure per line is the lines' own.
void WarmUpProcess(const std::string& dir) {
  const std::string w = dir + "/warm-up";
  std::filesystem::create_directories(w);
  MakeFiles(w, 64, 4);
  {
    Opened o = OpenFiles(w, true);
    auto e = Engine::Create(o.devices(), Config(CacheMode::kWriteBack), Replace::kNothing);
    if (!e.ok()) Die("warm-up", e.status());
    AlignedBuffer b(kFillChunk);
    std::memset(b.data(), 0, kFillChunk);
    Sweep(**e, false, 0, 64, b.data());
    Sweep(**e, true, 0, 64, b.data());
    if (Status s = (*e)->Shutdown(); !s.ok()) Die("warm-up", s);
  }
  std::filesystem::remove_all(w);
}

int Fill(const std::string& dir, uint64_t lines, uint64_t overwrites, bool flush, bool crash) {
  MakeFiles(dir, lines, 4);
  WarmUpProcess(dir);
  AlignedBuffer chunk(kFillChunk);
  std::memset(chunk.data(), 0, kFillChunk);  // the bench's own buffer, resident before the start
  const uint64_t rss_start = RssBytes();  // before the store and the engine's tables exist
  Opened o = OpenFiles(dir, true);
  auto created = Engine::Create(o.devices(), Config(CacheMode::kWriteBack), Replace::kNothing);
  if (!created.ok()) Die("create", created.status());
  Engine& e = **created;
  const int64_t rss_empty = EngineBytes(rss_start, *o.store);
  auto start = std::chrono::steady_clock::now();
  Sweep(e, false, 0, lines, chunk.data());  // 1: clean
  const double fill_s = Seconds(start);
  const int64_t rss_clean = EngineBytes(rss_start, *o.store);
  Sweep(e, false, lines, 3 * lines, chunk.data());  // 2: churn
  const uint64_t evictions = e.stats().evictions;
  std::memset(chunk.data(), 0x5A, kFillChunk);
  const uint64_t written_before = WrittenBytes();
  Sweep(e, true, 2 * lines, 3 * lines, chunk.data());  // 3: dirty
  if (Status s = e.Sync(); !s.ok()) Die("sync", s);
  const uint64_t dirty_written = WrittenBytes() - written_before;
  const MetadataStore::Memory store_memory = o.store->MemoryUsage();
  const int64_t rss_dirty = EngineBytes(rss_start, *o.store);
  std::printf("{\"lines\": %lu, \"fill_seconds\": %.2f, \"rss_bytes_per_line_empty\": %.1f, "
              "\"rss_bytes_per_line_clean\": %.1f, \"rss_bytes_per_line\": %.1f, "
              "\"churn_evictions\": %lu, \"dirty_lines\": %lu, \"store_bytes_per_line_filled\": %.1f, "
              "\"policy\": \"%s\"",
              lines, fill_s, PerLine(rss_empty, lines), PerLine(rss_clean, lines),
              PerLine(rss_dirty, lines), evictions, e.stats().dirty_lines,
              PerLine(dirty_written, lines), e.stats().policy.c_str());
  PrintStoreMemory(store_memory);
  auto [wb_iops, wb_bytes] = RandomWrites(e, 2 * lines, lines, overwrites, chunk.data());
  std::printf(", \"writeback_4k_iops\": %.0f, \"writeback_store_bytes_per_write\": %.1f", wb_iops, wb_bytes);
  if (crash) {
    std::printf("}\n");
    std::fflush(stdout);
    // Written again, so that the store's log holds what a running cache's
    // does (the measurement wrote the memtables out), then synced.
    Sweep(e, true, 2 * lines, 3 * lines, chunk.data());
    if (Status s = e.Sync(); !s.ok()) Die("sync", s);
    std::_Exit(0);  // the power fails with every line dirty
  }
  if (flush) {
    start = std::chrono::steady_clock::now();
    if (Status s = e.Flush(); !s.ok()) Die("flush", s);
    double flush_s = Seconds(start);
    if (Status s = e.SetMode(CacheMode::kWriteThrough); !s.ok()) Die("mode", s);
    auto [wt_iops, wt_bytes] = RandomWrites(e, 2 * lines, lines, overwrites, chunk.data());
    if (Status s = e.SetMode(CacheMode::kWriteBack); !s.ok()) Die("mode", s);
    std::printf(", \"writethrough_4k_iops\": %.0f, \"writethrough_store_bytes_per_write\": %.1f, "
                "\"flush_seconds\": %.2f", wt_iops, wt_bytes, flush_s);
  }
  std::printf("}\n");
  if (Status s = e.Shutdown(); !s.ok()) Die("shutdown", s);
  return 0;
}

// The store's files, without the slot table's snapshot (reported apart).
uint64_t BytesUnder(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().filename() != "SNAPSHOT") total += entry.file_size();
  }
  return total;
}

uint64_t SnapshotBytes(const std::string& dir) {
  std::error_code ignored;
  const auto size = std::filesystem::file_size(dir + "/SNAPSHOT", ignored);
  return ignored ? 0 : size;
}

int Open(const std::string& dir) {
  const uint64_t store_bytes = BytesUnder(dir + "/meta"), snapshot_bytes = SnapshotBytes(dir + "/meta");
  WarmUpProcess(dir);
  const uint64_t rss_before = RssBytes();
  auto start = std::chrono::steady_clock::now();
  Opened o = OpenFiles(dir, false);
  const double store_open_s = Seconds(start);
  Result<Superblock> sb = ReadSuperblock(o.cache.get());
  if (!sb.ok()) Die("superblock", sb.status());
  auto opened = Engine::Open(o.devices(), Config(CacheMode::kWriteBack));
  if (!opened.ok()) Die("open", opened.status());
  double open_s = Seconds(start);
  const uint64_t lines = (*opened)->stats().occupancy_lines;
  const MetadataStore::Memory store_memory = o.store->MemoryUsage();
  const int64_t rss = EngineBytes(rss_before, *o.store);
  std::printf("{\"lines\": %lu, \"dirty_lines\": %lu, \"after_clean_shutdown\": %s, "
              "\"open_seconds\": %.3f, \"store_open_seconds\": %.3f, "
              "\"from_snapshot\": %s, \"rss_bytes_per_line\": %.1f, "
              "\"store_bytes_on_disk_per_line\": %.1f, \"snapshot_bytes_per_line\": %.1f",
              lines, (*opened)->stats().dirty_lines, sb->clean_shutdown ? "true" : "false", open_s,
              store_open_s, (*opened)->started_from_snapshot() ? "true" : "false",
              PerLine(rss, lines), PerLine(store_bytes, lines),
              PerLine(snapshot_bytes, lines));
  PrintStoreMemory(store_memory);
  std::printf("}\n");
  return (*opened)->Shutdown().ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  cachecore::ReturnFreedMemoryPromptly();  // as cachectl's daemon does
  std::string verb = argc > 1 ? argv[1] : "", dir;
  uint64_t lines = 0, overwrites = 20000;
  bool flush = true, crash = false;
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i], value = i + 1 < argc ? argv[i + 1] : "";
    if (flag == "--no-flush") flush = false;
    else if (flag == "--crash") crash = true;
    else if (flag == "--dir") dir = argv[++i];
    else if (flag == "--lines" && !value.empty()) lines = std::stoull(argv[++i]);
    else if (flag == "--overwrites" && !value.empty()) overwrites = std::stoull(argv[++i]);
    else lines = 0;  // unknown: the usage below
  }
  if (verb == "fill" && !dir.empty() && lines > 0) return Fill(dir, lines, overwrites, flush, crash);
  if (verb == "open" && !dir.empty()) return Open(dir);
  std::fprintf(stderr, "usage: cachectl-meta-bench fill --dir DIR --lines N [--overwrites M] [--no-flush] [--crash]\n"
                       "       cachectl-meta-bench open --dir DIR\n");
  return 2;
}
