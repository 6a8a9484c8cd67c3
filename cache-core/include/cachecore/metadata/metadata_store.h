// MetadataStore: the cache's metadata in RocksDB. What it holds:
//   "id"            the CacheIdentity (must match the superblock)
//   "cfg/<name>"    configuration values (mode, cutoff, ...), as text
//   "line/<slot>"   one LineRecord per occupied cache line; <slot> is a
//                   big-endian u64, so an iteration visits slots in order
//   "flush/completed" the last flush epoch completed (format 2): every
//                   record built in an earlier epoch is stable
// Writes are unsynced by default; Sync() makes everything written so far
// durable (the engine calls it on FLUSH and FUA). Thread-safe.
//
// The first write or sync that fails puts the handle in a failed state:
// every later write and sync fails at once, with the first error, without
// reaching RocksDB (whose builds with assertions, Debian's among them,
// abort the process at a log sync after a failed log write). Reads still
// work. Reopening the store runs RocksDB's recovery and starts afresh.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "cachecore/base/status.h"
#include "cachecore/metadata/superblock.h"

namespace rocksdb {
class DB;
class Env;
class WriteBatch;
}  // namespace rocksdb

namespace cachecore {

// How a crash-recovered block is judged when its data fails its checksum.
enum class BlockClass : uint8_t {
  kInvalid = 0,           // not cached
  kClean = 1,             // origin holds the same data: on mismatch, read the origin
  kDirty = 2,             // only the cache holds it, flushed: on mismatch, EIO
  kDirtyFresh = 3,        // dirty, written since the last flush over an origin copy:
                          // on mismatch the origin holds the last flushed data
  kDirtyOverwritten = 4,  // dirty, rewritten in place since the last flush over
                          // flushed dirty data: whatever 4 KiB the cache holds is
                          // that data or a later write (4 KiB writes are atomic)
  kCleanFresh = 5,        // clean, filled or updated since the last flush: the
                          // origin may not hold it durably yet. After a crash a
                          // block that verifies is written back; one that fails
                          // is dropped (the origin holds the last flushed data)
};

// The epoch of a record no flush settles: one built ahead of the write it
// announces (it must stay fresh until that write's own record replaces
// it), and every record of format 1. Its fresh blocks are proven at a start.
constexpr uint64_t kNoEpoch = UINT64_MAX;

struct LineRecord {
  uint64_t origin_line = 0;
  // The flush epoch the record was built in, for a record built with no
  // I/O in flight for its line: once a flush of a later epoch has completed
  // (GetCompletedFlush), its fresh blocks are stable.
  uint64_t epoch = kNoEpoch;
  std::vector<BlockClass> classes;  // one per 4 KiB block of the line
  std::vector<uint32_t> crcs;       // CRC32C of each block's data
};

// Format 2 (with the epoch); format 1's layout for a record with kNoEpoch.
std::string EncodeLineRecord(const LineRecord& record);
// Either format. kCorruption when the value is truncated or fails its own
// checksum. The second form reuses `out`'s vectors (no allocation a record).
Result<LineRecord> DecodeLineRecord(const std::string& value);
Status DecodeLineRecordInto(const char* value, size_t size, LineRecord& out);

struct MetadataOptions {
  bool create_if_missing = false;
  bool read_only = false;       // open without writing anything (cachectl check)
  rocksdb::Env* env = nullptr;  // nullptr: the default Env (tests inject faults here)
  // No compaction until AllowCompactions(): a warm start's scan of the
  // records then has both cores, and reads tables that do not change under
  // it (Engine::Open allows them once the records are read).
  bool defer_compactions = false;
};

class MetadataStore {
 public:
  // Opens the store in directory `path`. Without create_if_missing a missing
  // store is kNotFound, with a message naming the path.
  static Result<std::unique_ptr<MetadataStore>> Open(const std::string& path,
                                                     const MetadataOptions& options);
  ~MetadataStore();

  Result<CacheIdentity> GetIdentity();  // kNotFound on a store never initialised
  Status PutIdentity(const CacheIdentity& identity, bool sync);
  Result<std::string> GetConfig(const std::string& name);  // kNotFound if unset
  Status PutConfig(const std::string& name, const std::string& value, bool sync);

  // Line updates collected by the caller and applied as one atomic write.
  class Batch {
   public:
    Batch();
    ~Batch();
    void PutLine(uint64_t slot, const LineRecord& record);
    void DeleteLine(uint64_t slot);
    bool empty() const;
    void Clear();
    rocksdb::WriteBatch* rep() { return rep_.get(); }

   private:
    std::unique_ptr<rocksdb::WriteBatch> rep_;
  };
  Status Apply(Batch& batch, bool sync);
  // Makes every write so far durable.
  Status Sync();
  // Records (unsynced) that flush `epoch` completed: the engine writes it
  // after the devices' flush and before the store's sync, so once durable
  // every record built before `epoch` had its data flushed.
  Status PutCompletedFlush(uint64_t epoch);
  // The last completed flush recorded; 0 when none (or format 1).
  Result<uint64_t> GetCompletedFlush();
  // Lets compactions run (a store opened with defer_compactions); nothing
  // otherwise. Until then the log's tables pile up in level 0.
  Status AllowCompactions();
  bool CompactionsDeferred() const;
  // Writes the memtables out (a clean shutdown: the next open reads tables
  // instead of replaying the log).
  Status FlushMemtables();
  // The sequence number of the latest write: after Sync() every write up to
  // it is durable, and a reopened store recovers at least that far.
  uint64_t LatestSequence() const;

  // A snapshot: a file beside the store, written at a clean shutdown so that
  // the next start copies tables instead of decoding every record. `tag`
  // says whose it is (the caller's identity and layout); `parts` follow it
  // in order, under one CRC32C. It is valid only while the store has taken
  // no write since (its latest sequence number is kept with it). Replaces
  // the previous one durably, or leaves it (a failure costs start time).
  Status WriteSnapshot(const std::string& tag, std::span<const std::span<const uint8_t>> parts);
  // Reads the snapshot into `parts` (their sizes must be the written
  // ones). kNotFound: none; kMismatch: another tag, other sizes, or the
  // store has changed since; kCorruption: it fails its checksum. On any
  // error `parts` may hold part of it.
  Status ReadSnapshot(const std::string& tag, std::span<const std::span<uint8_t>> parts);
  // Removes it (a start that used it: the store changes from here on).
  Status DropSnapshot();
  // Visits every line record in slot order; stops at the first non-OK return.
  using LineVisitor = std::function<Status(uint64_t slot, const LineRecord&)>;
  Status ForEachLine(const LineVisitor& visit);
  // The same for the records of slots in [first, end); safe to run on
  // several threads at once.
  Status ForEachLineIn(uint64_t first, uint64_t end, const LineVisitor& visit);
  // Removes every line record (a cold start over a fresh store).
  Status DeleteAllLines();

  // RocksDB's own memory, apart from the engine's tables: its memtables
  // (unflushed writes: arena and, estimated, the vector memtable's entry
  // pointers) and block cache, each with the cap that bounds it.
  struct Memory {
    uint64_t memtables = 0, memtables_cap = 0;
    uint64_t block_cache = 0, block_cache_cap = 0;
  };
  Memory MemoryUsage() const;
  // Whether RocksDB is flushing or compacting now (its buffers then come
  // and go: a measurement of memory waits for this to be false).
  bool BackgroundWorkRunning() const;

  // True once a write or sync failed (see above); the first error then.
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Status failure() const;

 private:
  explicit MetadataStore(rocksdb::DB* db);
  // Runs a write (shared) or a log sync (exclusive: a sync never runs
  // beside a write that may fail, nor after one that did) unless the
  // handle has failed, and fails the handle when it fails.
  template <typename Op>
  Status Guarded(bool exclusive, Op op);
  std::unique_ptr<rocksdb::DB> db_;
  std::shared_mutex io_mu_;
  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mu_;
  Status failure_;  // under failure_mu_
};

}  // namespace cachecore
