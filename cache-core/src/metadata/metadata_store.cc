#include "cachecore/metadata/metadata_store.h"

#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/perf_context.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <bit>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "cachecore/metadata/checksum.h"
#include "metadata/rocks_status.h"

namespace cachecore {

namespace {

const char kIdentityKey[] = "id";
const char kConfigPrefix[] = "cfg/";
const char kLinePrefix[] = "line/";
const char kCompletedFlushKey[] = "flush/completed";

std::string LineKey(uint64_t slot) {
  std::string key(kLinePrefix);
  for (int shift = 56; shift >= 0; shift -= 8) key += static_cast<char>((slot >> shift) & 0xFF);
  return key;
}

// Just past every line key: the prefix with its last byte one higher.
std::string PastLineKeys() {
  std::string key(kLinePrefix);
  key.back() = static_cast<char>(key.back() + 1);
  return key;
}

uint64_t SlotOfKey(const rocksdb::Slice& key) {
  uint64_t slot = 0;
  for (size_t i = sizeof(kLinePrefix) - 1; i < key.size(); ++i) {
    slot = (slot << 8) | static_cast<uint8_t>(key[i]);
  }
  return slot;
}

// RocksDB counts every key comparison in a thread-local perf context by
// default: on a memtable insert that is a thread-local lookup (through
// __tls_get_addr, RocksDB being a shared library) per comparison, about a
// tenth of the record committer's time under 64 KiB writes. Nothing here
// reads those counts.
void StopPerfCountsOnThisThread() {
  thread_local bool stopped = false;
  if (stopped) return;
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  stopped = true;
}

rocksdb::WriteOptions WriteOpts(bool sync) {
  rocksdb::WriteOptions o;
  o.sync = sync;
  return o;
}

// Makes every background error RocksDB meets fatal, so that it stops
// taking writes at once. A failed log append is otherwise a "regular"
// error (ENOSPC, say): the DB goes on, and the next write, already queued
// behind the failed one, appends to the log file that failed, which a
// RocksDB built with assertions (Debian's) answers with an abort. The
// listener runs inside the failed write, before the next one may start;
// MetadataStore's own guard covers what comes later.
class StopAtFirstError : public rocksdb::EventListener {
 public:
  const char* Name() const override { return "cachectl-stop-at-first-error"; }
  void OnBackgroundError(rocksdb::BackgroundErrorReason, rocksdb::Status* bg_error) override {
    if (bg_error != nullptr && !bg_error->ok()) {
      *bg_error = rocksdb::Status(*bg_error, rocksdb::Status::Severity::kFatalError);
    }
  }
  // No recovery in place (RocksDB's own for ENOSPC asserts on a fatal
  // error): the engine reopens the store when the cache is restarted.
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status,
                            bool* auto_recovery) override {
    if (auto_recovery != nullptr) *auto_recovery = false;
  }
};

// RocksDB's informational log (LOG in the store's directory), written so
// that a failed write is only a lost line. RocksDB's own writes it through
// a file writer that, in builds with assertions, aborts the process at the
// next line after a failed one: on a full metadata disk that is the first
// error message it logs. Written through the store's Env (an in-memory one
// keeps it in memory).
class TolerantLogger : public rocksdb::Logger {
 public:
  TolerantLogger(rocksdb::Env* env, const std::string& dir) {
    const std::string path = dir + "/LOG";
    (void)env->CreateDirIfMissing(dir);  // RocksDB makes it too; the log comes first
    (void)env->RenameFile(path, path + ".old");  // keep the last run's
    if (!env->NewWritableFile(path, &file_, rocksdb::EnvOptions()).ok()) file_.reset();
  }
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    int n = std::vsnprintf(line, sizeof(line) - 1, format, ap);
    if (n < 0) return;
    size_t len = std::min<size_t>(static_cast<size_t>(n), sizeof(line) - 2);
    line[len++] = '\n';
    std::lock_guard lock(mu_);
    if (file_) (void)file_->Append(rocksdb::Slice(line, len));  // a full disk loses the line
  }

 private:
  std::mutex mu_;
  std::unique_ptr<rocksdb::WritableFile> file_;
};

}  // namespace

// Record layout: u64 origin line, u16 block count, then per block a u8 class
// and a u32 CRC, then a u32 CRC32C of everything before it.
// Format 1: origin line u64, blocks u16, per block (class u8, CRC32C u32),
// CRC32C of all before it. Format 2 puts the epoch (u64) after the origin
// line; the lengths of the two never meet (14 + 5n against 22 + 5n).
constexpr size_t kV1Fixed = 14, kV2Fixed = 22;

std::string EncodeLineRecord(const LineRecord& r) {
  std::string out;
  uint16_t blocks = static_cast<uint16_t>(r.classes.size());
  out.reserve(kV2Fixed + 5 * size_t{blocks});
  out.append(reinterpret_cast<const char*>(&r.origin_line), 8);
  if (r.epoch != kNoEpoch) out.append(reinterpret_cast<const char*>(&r.epoch), 8);
  out.append(reinterpret_cast<const char*>(&blocks), 2);
  for (size_t i = 0; i < blocks; ++i) {
    out += static_cast<char>(r.classes[i]);
    out.append(reinterpret_cast<const char*>(&r.crcs[i]), 4);
  }
  uint32_t crc = Crc32c(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&crc), 4);
  return out;
}

Status DecodeLineRecordInto(const char* v, size_t size, LineRecord& r) {
  if (size < kV1Fixed) return Status::Corruption("line record is truncated");
  // Which format: the one whose length the block count fits.
  uint16_t blocks;
  std::memcpy(&blocks, v + 8, 2);
  size_t head = 10;
  if (size != kV1Fixed + 5 * size_t{blocks}) {
    if (size < kV2Fixed) return Status::Corruption("line record has the wrong length");
    std::memcpy(&blocks, v + 16, 2);
    if (size != kV2Fixed + 5 * size_t{blocks}) return Status::Corruption("line record has the wrong length");
    head = 18;
  }
  uint32_t stored;
  std::memcpy(&stored, v + size - 4, 4);
  if (stored != Crc32c(v, size - 4)) return Status::Corruption("line record fails its checksum");
  std::memcpy(&r.origin_line, v, 8);
  r.epoch = kNoEpoch;
  if (head == 18) std::memcpy(&r.epoch, v + 8, 8);
  r.classes.resize(blocks);
  r.crcs.resize(blocks);
  for (size_t i = 0; i < blocks; ++i) {
    uint8_t c = static_cast<uint8_t>(v[head + 5 * i]);
    if (c > static_cast<uint8_t>(BlockClass::kCleanFresh)) {
      return Status::Corruption("line record has an unknown block class");
    }
    r.classes[i] = static_cast<BlockClass>(c);
    std::memcpy(&r.crcs[i], v + head + 5 * i + 1, 4);
  }
  return Status::Ok();
}

Result<LineRecord> DecodeLineRecord(const std::string& v) {
  LineRecord r;
  CACHECORE_RETURN_IF_ERROR(DecodeLineRecordInto(v.data(), v.size(), r));
  return r;
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  if (s.IsNotFound()) return Status::NotFound(what + ": not found");
  if (s.IsCorruption()) return Status::Corruption(what + ": " + s.ToString());
  return Status::IoError(what + ": " + s.ToString());
}

MetadataStore::MetadataStore(rocksdb::DB* db) : db_(db) {}
MetadataStore::~MetadataStore() = default;

template <typename Op>
Status MetadataStore::Guarded(bool exclusive, Op op) {
  std::shared_lock shared(io_mu_, std::defer_lock);
  std::unique_lock sole(io_mu_, std::defer_lock);
  if (exclusive) sole.lock();
  else shared.lock();
  if (failed()) return failure();
  Status s = op();
  if (!s.ok()) {
    std::lock_guard lock(failure_mu_);
    if (!failed()) {
      failure_ = Status::IoError("the metadata store failed (" + s.message() +
                                 "); nothing more is written to it until the cache is restarted");
      failed_.store(true, std::memory_order_release);
    }
  }
  return s;
}

Status MetadataStore::failure() const {
  std::lock_guard lock(failure_mu_);
  return failure_;
}

namespace {
// The Env of a read-only store: RocksDB's own, except that opening starts no
// background thread (a reader schedules no flush or compaction). Those
// threads are one pool per process; `cachectl rebuild` reads the store and
// then forks the daemon, whose copy of a started pool would believe its
// threads run, and whose first memtable flush would then wait forever.
class ReaderEnv : public rocksdb::EnvWrapper {
 public:
  ReaderEnv() : rocksdb::EnvWrapper(rocksdb::Env::Default()) {}
  const char* Name() const override { return "CachectlReaderEnv"; }
  void SetBackgroundThreads(int, Priority) override {}
  void IncBackgroundThreadsIfNeeded(int, Priority) override {}
};

rocksdb::Env* ReaderEnvInstance() {
  static ReaderEnv* env = new ReaderEnv;  // lives as long as any store may
  return env;
}
}  // namespace

Result<std::unique_ptr<MetadataStore>> MetadataStore::Open(const std::string& path,
                                                           const MetadataOptions& options) {
  rocksdb::Options o;
  o.create_if_missing = options.create_if_missing;
  if (options.env != nullptr) o.env = options.env;
  else if (options.read_only) o.env = ReaderEnvInstance();
  // A torn tail (a crash mid-append) is dropped; damage before the log's
  // tail fails the open. RocksDB cannot tell a log cut short from a torn
  // tail: the engine's sync mark (superblock.h) catches that case.
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  o.max_background_jobs = 2;
  // What is not yet in a table a start after a crash replays from the log
  // (up to two memtables): 16 MiB each, not RocksDB's 64, keeps that near
  // 0.2 s, where a full 64 MiB log took 1.4 s of a start at ten million
  // lines. The tables are flushed and compacted more often for it (RocksDB
  // writes about 10 % more per client write).
  o.write_buffer_size = 16 << 20;
  // Written far more than read (records only at a start): a vector memtable
  // appends each write and sorts once at a flush or a read; the default
  // skip list's comparisons were the record committer's largest cost.
  o.memtable_factory.reset(new rocksdb::VectorRepFactory);
  o.allow_concurrent_memtable_write = false;  // the vector memtable cannot take them
  // Closing never needs to write: everything the engine relies on is in the
  // log, which Sync() makes durable. This also keeps a close after an I/O
  // failure from doing more damage.
  o.avoid_flush_during_shutdown = true;
  o.disable_auto_compactions = options.defer_compactions && !options.read_only;
  o.listeners.push_back(std::make_shared<StopAtFirstError>());
  // The tables' index blocks in the block cache, under its cap: outside it
  // they stay in RAM for every table file, about a hundredth of the store
  // (12 MB at 10 million lines), growing with the cache and counted nowhere.
  rocksdb::BlockBasedTableOptions table;
  table.cache_index_and_filter_blocks = true;
  // Records are read back only by a start's scan, front to back: blocks of
  // 32 KiB, not 4, are an eighth of the fetches, checksums and
  // decompressions a scan pays for, and of the index's entries.
  table.block_size = 32 * 1024;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  if (!options.read_only) o.info_log = std::make_shared<TolerantLogger>(o.env, path);
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = options.read_only ? rocksdb::DB::OpenForReadOnly(o, path, &db)
                                        : rocksdb::DB::Open(o, path, &db);
  if (!s.ok()) {
    if (!options.create_if_missing && s.IsInvalidArgument()) {
      return Status::NotFound("no metadata store at " + path);
    }
    return FromRocks(s, "cannot open the metadata store at " + path);
  }
  return std::unique_ptr<MetadataStore>(new MetadataStore(db));
}

MetadataStore::Memory MetadataStore::MemoryUsage() const {
  Memory m;
  auto property = [&](const char* name) {
    uint64_t value = 0;
    return db_->GetIntProperty(name, &value) ? value : 0;
  };
  // The vector memtable's arrays of entry pointers are not in its arena,
  // which is all RocksDB counts: 8 bytes an entry, in a vector grown by
  // doubling (each immutable memtable's own; counted here as one).
  const auto pointers = [](uint64_t entries) { return entries == 0 ? 0 : std::bit_ceil(entries) * 8; };
  m.memtables = property("rocksdb.cur-size-all-mem-tables") +
                pointers(property("rocksdb.num-entries-active-mem-table")) +
                pointers(property("rocksdb.num-entries-imm-mem-tables"));
  m.block_cache = property("rocksdb.block-cache-usage");
  m.block_cache_cap = property("rocksdb.block-cache-capacity");
  const rocksdb::Options o = db_->GetOptions();
  // An entry takes at least 48 bytes of arena (a line record's key, value
  // and RocksDB's own header): the most a memtable can hold.
  m.memtables_cap = (uint64_t{o.write_buffer_size} + pointers(o.write_buffer_size / 48)) *
                    static_cast<uint64_t>(o.max_write_buffer_number);
  return m;
}

bool MetadataStore::BackgroundWorkRunning() const {
  uint64_t flushes = 0, compactions = 0, pending = 0;
  db_->GetIntProperty("rocksdb.num-running-flushes", &flushes);
  db_->GetIntProperty("rocksdb.num-running-compactions", &compactions);
  db_->GetIntProperty("rocksdb.compaction-pending", &pending);
  return flushes + compactions + pending > 0;
}

Result<CacheIdentity> MetadataStore::GetIdentity() {
  std::string value;
  Status s = FromRocks(db_->Get(rocksdb::ReadOptions(), kIdentityKey, &value), "cache identity");
  if (!s.ok()) return s;
  return DecodeIdentity(value);
}

Status MetadataStore::PutIdentity(const CacheIdentity& identity, bool sync) {
  return Guarded(false, [&] {
    return FromRocks(db_->Put(WriteOpts(sync), kIdentityKey, EncodeIdentity(identity)),
                     "writing the cache identity");
  });
}

Result<std::string> MetadataStore::GetConfig(const std::string& name) {
  std::string value;
  Status s = FromRocks(db_->Get(rocksdb::ReadOptions(), kConfigPrefix + name, &value),
                       "config " + name);
  if (!s.ok()) return s;
  return value;
}

Status MetadataStore::PutConfig(const std::string& name, const std::string& value, bool sync) {
  return Guarded(false, [&] {
    return FromRocks(db_->Put(WriteOpts(sync), kConfigPrefix + name, value), "config " + name);
  });
}

MetadataStore::Batch::Batch() : rep_(std::make_unique<rocksdb::WriteBatch>()) {}
MetadataStore::Batch::~Batch() = default;
void MetadataStore::Batch::PutLine(uint64_t slot, const LineRecord& record) {
  rep_->Put(LineKey(slot), EncodeLineRecord(record));
}
void MetadataStore::Batch::DeleteLine(uint64_t slot) { rep_->Delete(LineKey(slot)); }
bool MetadataStore::Batch::empty() const { return rep_->Count() == 0; }
void MetadataStore::Batch::Clear() { rep_->Clear(); }

Status MetadataStore::Apply(Batch& batch, bool sync) {
  if (batch.empty() && !sync) return Status::Ok();
  StopPerfCountsOnThisThread();
  if (batch.empty()) return Sync();
  return Guarded(false, [&] {
    return FromRocks(db_->Write(WriteOpts(sync), batch.rep()), "writing line metadata");
  });
}

uint64_t MetadataStore::LatestSequence() const { return db_->GetLatestSequenceNumber(); }

Status MetadataStore::Sync() {
  return Guarded(true, [&] {
    rocksdb::Status s = db_->SyncWAL();
    if (s.IsNotSupported()) {
      // Some Envs (the in-memory one replay uses) cannot sync the log alone;
      // a synced write syncs it with everything before it.
      s = db_->Put(WriteOpts(true), "sync", rocksdb::Slice());
    }
    return FromRocks(s, "syncing the metadata log");
  });
}


Status MetadataStore::PutCompletedFlush(uint64_t epoch) {
  return Guarded(false, [&] {
    return FromRocks(db_->Put(WriteOpts(false), kCompletedFlushKey,
                              rocksdb::Slice(reinterpret_cast<const char*>(&epoch), 8)),
                     "recording a completed flush");
  });
}

Result<uint64_t> MetadataStore::GetCompletedFlush() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kCompletedFlushKey, &value);
  if (s.IsNotFound()) return uint64_t{0};
  CACHECORE_RETURN_IF_ERROR(FromRocks(s, "the last completed flush"));
  if (value.size() != 8) return Status::Corruption("the last completed flush's record has the wrong length");
  uint64_t epoch;
  std::memcpy(&epoch, value.data(), 8);
  return epoch;
}

bool MetadataStore::CompactionsDeferred() const { return db_->GetOptions().disable_auto_compactions; }

Status MetadataStore::AllowCompactions() {
  if (!CompactionsDeferred()) return Status::Ok();
  return FromRocks(db_->SetOptions({{"disable_auto_compactions", "false"}}), "letting the store compact");
}

Status MetadataStore::FlushMemtables() {
  return Guarded(false, [&] {
    rocksdb::FlushOptions o;
    o.wait = true;
    return FromRocks(db_->Flush(o), "writing the metadata's memtables out");
  });
}

Status MetadataStore::ForEachLine(const LineVisitor& visit) { return ForEachLineIn(0, UINT64_MAX, visit); }

Status MetadataStore::ForEachLineIn(uint64_t first, uint64_t end, const LineVisitor& visit) {
  // Read once, front to back: ahead of the iterator, and not through the
  // block cache (a start's scan would only evict what is there).
  StopPerfCountsOnThisThread();  // the load's threads
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.readahead_size = 2 << 20;
  const std::string upper = end == UINT64_MAX ? PastLineKeys() : LineKey(end);
  const rocksdb::Slice bound(upper);
  ro.iterate_upper_bound = &bound;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  LineRecord r;  // decoded into in place: no allocation a record
  for (it->Seek(LineKey(first)); it->Valid() && it->key().starts_with(kLinePrefix); it->Next()) {
    Status s = DecodeLineRecordInto(it->value().data(), it->value().size(), r);
    if (!s.ok()) return Status::Corruption("slot " + std::to_string(SlotOfKey(it->key())) + ": " + s.message());
    CACHECORE_RETURN_IF_ERROR(visit(SlotOfKey(it->key()), r));
  }
  return FromRocks(it->status(), "reading line metadata");
}

Status MetadataStore::DeleteAllLines() {
  const std::string end = PastLineKeys();
  return Guarded(false, [&] {
    return FromRocks(db_->DeleteRange(WriteOpts(true), db_->DefaultColumnFamily(), kLinePrefix, end),
                     "clearing line metadata");
  });
}

}  // namespace cachecore
