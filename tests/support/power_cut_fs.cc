#include "power_cut_fs.h"

#include <unistd.h>

#include <cstdlib>

namespace cachecore::testing {

namespace {

rocksdb::IOStatus PowerIsOff() { return rocksdb::IOStatus::IOError("simulated power cut"); }

class TrackedFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  TrackedFile(std::unique_ptr<rocksdb::FSWritableFile> file, PowerCutFs* fs, std::string fname)
      : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs), fname_(std::move(fname)) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* dbg) override {
    if (fs_->frozen()) return PowerIsOff();
    if (rocksdb::IOStatus e = fs_->InjectedAppendError(); !e.ok()) return e;
    rocksdb::IOStatus s = target()->Append(data, o, dbg);
    if (s.ok()) fs_->Appended(fname_, data.size());
    return s;
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo&,
                           rocksdb::IODebugContext* dbg) override {
    return Append(data, o, dbg);
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice&, uint64_t, const rocksdb::IOOptions&,
                                     rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::NotSupported("PositionedAppend");
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (fs_->frozen()) return PowerIsOff();
    if (rocksdb::IOStatus e = fs_->InjectedSyncError(); !e.ok()) return e;
    rocksdb::IOStatus s = target()->Sync(o, dbg);
    if (s.ok()) fs_->Synced(fname_);
    return s;
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    return Sync(o, dbg);
  }
  rocksdb::IOStatus RangeSync(uint64_t, uint64_t, const rocksdb::IOOptions&,
                              rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();  // a hint only: proves nothing durable
  }
  rocksdb::IOStatus Close(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    return target()->Close(o, dbg);
  }

 private:
  PowerCutFs* fs_;
  std::string fname_;
};

}  // namespace

PowerCutFs::PowerCutFs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}

PowerCutStorage NewPowerCutStorage() {
  PowerCutStorage s;
  s.fs = std::make_shared<PowerCutFs>();
  s.env = rocksdb::NewCompositeEnv(s.fs);
  return s;
}

bool PowerCutFs::frozen() const {
  std::lock_guard lock(mu_);
  return frozen_;
}

void PowerCutFs::Appended(const std::string& fname, uint64_t bytes) {
  std::lock_guard lock(mu_);
  files_[fname].size += bytes;
}

void PowerCutFs::Synced(const std::string& fname) {
  std::lock_guard lock(mu_);
  FileState& f = files_[fname];
  f.synced = f.size;
}

rocksdb::IOStatus PowerCutFs::Wrap(const std::string& fname, uint64_t initial_size,
                                   std::unique_ptr<rocksdb::FSWritableFile>* result) {
  {
    std::lock_guard lock(mu_);
    files_[fname] = FileState{initial_size, initial_size};
  }
  *result = std::make_unique<TrackedFile>(std::move(*result), this, fname);
  return rocksdb::IOStatus::OK();
}

rocksdb::IOStatus PowerCutFs::NewWritableFile(const std::string& fname,
                                              const rocksdb::FileOptions& opts,
                                              std::unique_ptr<rocksdb::FSWritableFile>* result,
                                              rocksdb::IODebugContext* dbg) {
  if (frozen()) return PowerIsOff();
  rocksdb::IOStatus s = target()->NewWritableFile(fname, opts, result, dbg);
  if (!s.ok()) return s;
  return Wrap(fname, 0, result);
}

rocksdb::IOStatus PowerCutFs::ReopenWritableFile(const std::string& fname,
                                                 const rocksdb::FileOptions& opts,
                                                 std::unique_ptr<rocksdb::FSWritableFile>* result,
                                                 rocksdb::IODebugContext* dbg) {
  if (frozen()) return PowerIsOff();
  uint64_t size = 0;
  target()->GetFileSize(fname, rocksdb::IOOptions(), &size, dbg);
  rocksdb::IOStatus s = target()->ReopenWritableFile(fname, opts, result, dbg);
  if (!s.ok()) return s;
  return Wrap(fname, size, result);
}

rocksdb::IOStatus PowerCutFs::RenameFile(const std::string& src, const std::string& dst,
                                         const rocksdb::IOOptions& opts,
                                         rocksdb::IODebugContext* dbg) {
  if (frozen()) return PowerIsOff();
  rocksdb::IOStatus s = target()->RenameFile(src, dst, opts, dbg);
  if (!s.ok()) return s;
  std::lock_guard lock(mu_);
  auto it = files_.find(src);
  if (it != files_.end()) {
    files_[dst] = it->second;
    files_.erase(src);
  } else {
    files_.erase(dst);
  }
  return s;
}

rocksdb::IOStatus PowerCutFs::DeleteFile(const std::string& fname, const rocksdb::IOOptions& opts,
                                         rocksdb::IODebugContext* dbg) {
  if (frozen()) return PowerIsOff();
  rocksdb::IOStatus s = target()->DeleteFile(fname, opts, dbg);
  std::lock_guard lock(mu_);
  files_.erase(fname);
  return s;
}

void PowerCutFs::PowerCut() {
  std::lock_guard lock(mu_);
  frozen_ = true;
}

void PowerCutFs::FailWrites(rocksdb::IOStatus append_error, rocksdb::IOStatus sync_error) {
  std::lock_guard lock(mu_);
  append_error_ = std::move(append_error);
  sync_error_ = std::move(sync_error);
}

void PowerCutFs::Heal() { FailWrites(rocksdb::IOStatus::OK(), rocksdb::IOStatus::OK()); }

rocksdb::IOStatus PowerCutFs::InjectedAppendError() const {
  std::lock_guard lock(mu_);
  return append_error_;
}

rocksdb::IOStatus PowerCutFs::InjectedSyncError() const {
  std::lock_guard lock(mu_);
  return sync_error_;
}

void PowerCutFs::Restore() {
  std::lock_guard lock(mu_);
  for (auto& [name, f] : files_) {
    if (f.synced < f.size) {
      // The base file system may not offer Truncate; the OS call always works.
      if (::truncate(name.c_str(), static_cast<off_t>(f.synced)) != 0) std::abort();
      f.size = f.synced;
    }
  }
  frozen_ = false;
}

}  // namespace cachecore::testing
