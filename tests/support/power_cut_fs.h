// PowerCutFs: a RocksDB FileSystem wrapper that knows how much of each file
// was synced, and on a simulated power cut throws away the rest, the way a
// real machine loses the page cache. Tests only.
//
// Use: open the DB with PowerCutStorage::env; at the cut call
// fs->PowerCut() (all writes, renames and deletes fail from then on),
// destroy the DB, then fs->Restore() truncates every file to its synced
// length and lifts the freeze.
#pragma once

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace cachecore::testing {

class PowerCutFs : public rocksdb::FileSystemWrapper {
 public:
  PowerCutFs();
  const char* Name() const override { return "PowerCutFs"; }

  void PowerCut();
  void Restore();
  // A failing metadata disk: from now on appends to, and syncs of, the
  // store's files fail with `append_error` and `sync_error` (OK: that
  // operation works), e.g. IOStatus::NoSpace() or IOError(), until Heal().
  void FailWrites(rocksdb::IOStatus append_error, rocksdb::IOStatus sync_error);
  void Heal();
  rocksdb::IOStatus InjectedAppendError() const;
  rocksdb::IOStatus InjectedSyncError() const;

  // Bookkeeping shared with the file wrappers.
  bool frozen() const;
  void Appended(const std::string& fname, uint64_t bytes);
  void Synced(const std::string& fname);

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& dst,
                               const rocksdb::IOOptions& opts, rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& fname, const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;

 private:
  rocksdb::IOStatus Wrap(const std::string& fname, uint64_t initial_size,
                         std::unique_ptr<rocksdb::FSWritableFile>* result);
  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, FileState> files_;
  bool frozen_ = false;
  rocksdb::IOStatus append_error_, sync_error_;
};

// The file system and an Env over it (for rocksdb::Options::env). Held
// side by side: the Env keeps the file system alive, not the other way.
struct PowerCutStorage {
  std::shared_ptr<PowerCutFs> fs;
  std::unique_ptr<rocksdb::Env> env;
};
PowerCutStorage NewPowerCutStorage();

}  // namespace cachecore::testing
