// PowerCutFs: a RocksDB FileSystem wrapper that knows how much of each file
// was synced, and on a simulated power cut throws away the rest, the way a
// real machine loses the page cache. Tests only.
//
// Use: open the DB with an Env from Env(); at the cut call PowerCut() (all
// writes, renames and deletes fail from then on), destroy the DB, then
// Restore() truncates every file to its synced length and lifts the freeze.
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
  // An Env over this file system, to put in rocksdb::Options::env.
  rocksdb::Env* env() { return env_.get(); }

  void PowerCut();
  void Restore();

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
  friend std::shared_ptr<PowerCutFs> NewPowerCutFs();
  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, FileState> files_;
  bool frozen_ = false;
  std::unique_ptr<rocksdb::Env> env_;
};

// Shared instance holder: RocksDB wants a shared_ptr for the file system.
std::shared_ptr<PowerCutFs> NewPowerCutFs();

}  // namespace cachecore::testing
