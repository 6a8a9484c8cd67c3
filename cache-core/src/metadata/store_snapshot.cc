// The snapshot file beside the store (MetadataStore::WriteSnapshot): the
// caller's tables as of a clean shutdown, so that the next start copies
// them instead of decoding every record. It is written through RocksDB's
// Env, as the store's own files are (tests inject faults and power cuts
// there), to a temporary name, synced, then renamed over the old one.
//
// Layout (host byte order: the file never leaves the machine that wrote
// it): magic, the tag's length and the tag, the store's latest sequence
// number, the count of parts and each one's size, the parts, then a CRC32C
// of everything before it.
#include <rocksdb/db.h>
#include <rocksdb/env.h>

#include <cstring>

#include "cachecore/metadata/checksum.h"
#include "cachecore/metadata/metadata_store.h"
#include "metadata/rocks_status.h"

namespace cachecore {

namespace {

constexpr uint64_t kSnapshotMagic = 0x3130504e53434343;  // "CCCSNP01"
constexpr size_t kChunk = 16 << 20;  // bytes per read or append call

std::string SnapshotPath(rocksdb::DB& db) { return db.GetName() + "/SNAPSHOT"; }

// Makes a rename or a removal in the store's directory durable.
Status SyncDirectory(rocksdb::Env& env, const std::string& dir) {
  std::unique_ptr<rocksdb::Directory> d;
  CACHECORE_RETURN_IF_ERROR(FromRocks(env.NewDirectory(dir, &d), "opening the store's directory"));
  return FromRocks(d->Fsync(), "syncing the store's directory");
}

// Appends `data` to `file`, extending `crc` over it.
Status AppendCounted(rocksdb::WritableFile& file, const void* data, size_t size, uint32_t& crc) {
  const auto* p = static_cast<const char*>(data);
  for (size_t done = 0; done < size;) {
    const size_t n = std::min(kChunk, size - done);
    CACHECORE_RETURN_IF_ERROR(FromRocks(file.Append(rocksdb::Slice(p + done, n)), "writing the snapshot"));
    done += n;
  }
  crc = Crc32c(data, size, crc);
  return Status::Ok();
}

// Reads exactly `size` bytes into `out`, extending `crc` over them.
Status ReadCounted(rocksdb::SequentialFile& file, void* out, size_t size, uint32_t& crc) {
  auto* p = static_cast<char*>(out);
  for (size_t done = 0; done < size;) {
    const size_t want = std::min(kChunk, size - done);
    rocksdb::Slice got;
    CACHECORE_RETURN_IF_ERROR(FromRocks(file.Read(want, &got, p + done), "reading the snapshot"));
    if (got.size() != want) return Status::Corruption("the snapshot is cut short");
    if (got.data() != p + done) std::memcpy(p + done, got.data(), got.size());
    done += want;
  }
  crc = Crc32c(out, size, crc);
  return Status::Ok();
}

template <typename T>
Status AppendValue(rocksdb::WritableFile& file, const T& v, uint32_t& crc) {
  return AppendCounted(file, &v, sizeof v, crc);
}

template <typename T>
Status ReadValue(rocksdb::SequentialFile& file, T& v, uint32_t& crc) {
  return ReadCounted(file, &v, sizeof v, crc);
}

}  // namespace

namespace {
// The whole file at `path`, synced and closed.
Status WriteSnapshotFile(rocksdb::Env& env, const std::string& path, const std::string& tag,
                         uint64_t sequence, std::span<const std::span<const uint8_t>> parts) {
  std::unique_ptr<rocksdb::WritableFile> file;
  CACHECORE_RETURN_IF_ERROR(FromRocks(env.NewWritableFile(path, &file, rocksdb::EnvOptions()),
                                      "creating the snapshot"));
  uint32_t crc = 0;
  const uint32_t tag_size = static_cast<uint32_t>(tag.size());
  const uint32_t count = static_cast<uint32_t>(parts.size());
  CACHECORE_RETURN_IF_ERROR(AppendValue(*file, kSnapshotMagic, crc));
  CACHECORE_RETURN_IF_ERROR(AppendValue(*file, tag_size, crc));
  CACHECORE_RETURN_IF_ERROR(AppendCounted(*file, tag.data(), tag.size(), crc));
  CACHECORE_RETURN_IF_ERROR(AppendValue(*file, sequence, crc));
  CACHECORE_RETURN_IF_ERROR(AppendValue(*file, count, crc));
  for (const auto& part : parts) CACHECORE_RETURN_IF_ERROR(AppendValue(*file, uint64_t{part.size()}, crc));
  for (const auto& part : parts) CACHECORE_RETURN_IF_ERROR(AppendCounted(*file, part.data(), part.size(), crc));
  uint32_t ignored = 0;
  CACHECORE_RETURN_IF_ERROR(AppendValue(*file, crc, ignored));
  CACHECORE_RETURN_IF_ERROR(FromRocks(file->Sync(), "syncing the snapshot"));
  return FromRocks(file->Close(), "closing the snapshot");
}
}  // namespace

Status MetadataStore::WriteSnapshot(const std::string& tag,
                                    std::span<const std::span<const uint8_t>> parts) {
  rocksdb::Env& env = *db_->GetEnv();
  const std::string path = SnapshotPath(*db_), temporary = path + ".tmp";
  Status s = WriteSnapshotFile(env, temporary, tag, LatestSequence(), parts);
  if (s.ok()) s = FromRocks(env.RenameFile(temporary, path), "renaming the snapshot");
  if (!s.ok()) {
    (void)env.DeleteFile(temporary);  // a full disk is the likely cause: give the space back
    return s;
  }
  return SyncDirectory(env, db_->GetName());
}

Status MetadataStore::ReadSnapshot(const std::string& tag, std::span<const std::span<uint8_t>> parts) {
  rocksdb::Env& env = *db_->GetEnv();
  const std::string path = SnapshotPath(*db_);
  if (!env.FileExists(path).ok()) return Status::NotFound("no snapshot at " + path);
  std::unique_ptr<rocksdb::SequentialFile> file;
  CACHECORE_RETURN_IF_ERROR(FromRocks(env.NewSequentialFile(path, &file, rocksdb::EnvOptions()),
                                    "opening the snapshot"));
  uint32_t crc = 0, tag_size = 0, count = 0;
  uint64_t magic = 0, sequence = 0;
  CACHECORE_RETURN_IF_ERROR(ReadValue(*file, magic, crc));
  if (magic != kSnapshotMagic) return Status::Corruption("the snapshot has no magic number");
  CACHECORE_RETURN_IF_ERROR(ReadValue(*file, tag_size, crc));
  if (tag_size != tag.size()) return Status::Mismatch("the snapshot is another cache's");
  std::string stored_tag(tag_size, '\0');
  CACHECORE_RETURN_IF_ERROR(ReadCounted(*file, stored_tag.data(), tag_size, crc));
  if (stored_tag != tag) return Status::Mismatch("the snapshot is another cache's");
  CACHECORE_RETURN_IF_ERROR(ReadValue(*file, sequence, crc));
  if (sequence != LatestSequence()) return Status::Mismatch("the store has changed since the snapshot");
  CACHECORE_RETURN_IF_ERROR(ReadValue(*file, count, crc));
  if (count != parts.size()) return Status::Mismatch("the snapshot has other parts");
  for (const auto& part : parts) {
    uint64_t size = 0;
    CACHECORE_RETURN_IF_ERROR(ReadValue(*file, size, crc));
    if (size != part.size()) return Status::Mismatch("the snapshot has parts of other sizes");
  }
  for (const auto& part : parts) CACHECORE_RETURN_IF_ERROR(ReadCounted(*file, part.data(), part.size(), crc));
  uint32_t stored = 0, ignored = 0;
  CACHECORE_RETURN_IF_ERROR(ReadValue(*file, stored, ignored));
  if (stored != crc) return Status::Corruption("the snapshot fails its checksum");
  char extra = 0;
  rocksdb::Slice more;
  if (file->Read(1, &more, &extra).ok() && !more.empty()) return Status::Corruption("the snapshot runs on past its end");
  return Status::Ok();
}

Status MetadataStore::DropSnapshot() {
  rocksdb::Env& env = *db_->GetEnv();
  const std::string path = SnapshotPath(*db_);
  (void)env.DeleteFile(path + ".tmp");  // a write cut short by a crash
  if (!env.FileExists(path).ok()) return Status::Ok();
  CACHECORE_RETURN_IF_ERROR(FromRocks(env.DeleteFile(path), "removing the snapshot"));
  return SyncDirectory(env, db_->GetName());
}

}  // namespace cachecore
