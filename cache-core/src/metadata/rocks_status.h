// RocksDB's status as the project's: `what` says what failed. Not a public
// header (the store and its snapshot file share it).
#pragma once

#include <rocksdb/status.h>

#include <string>

#include "cachecore/base/status.h"

namespace cachecore {

Status FromRocks(const rocksdb::Status& s, const std::string& what);

}  // namespace cachecore
