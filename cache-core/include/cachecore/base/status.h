// Status and Result<T>: how cache-core reports errors across its boundary.
// No exceptions cross the library edge; front ends convert a Status once
// (to an errno for NBD/ublk, to an exit code and a message for the CLI).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace cachecore {

enum class StatusCode {
  kOk = 0,
  kIoError,          // a device failed a read, write, flush or discard
  kInvalidArgument,  // the caller asked for something malformed
  kOutOfRange,       // offset/length beyond the device
  kCorruption,       // a checksum or on-disk structure did not verify
  kMismatch,         // superblock and metadata disagree (identity)
  kNotFound,
  kBusy,             // a resource is in use
  kNoSpace,
  kNotSupported,
};

// [[nodiscard]]: a dropped Status is a dropped error. Where ignoring one is
// right, write `(void)Call();  // why`.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status IoError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status InvalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status OutOfRange(std::string msg) { return {StatusCode::kOutOfRange, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status Mismatch(std::string msg) { return {StatusCode::kMismatch, std::move(msg)}; }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status Busy(std::string msg) { return {StatusCode::kBusy, std::move(msg)}; }
  static Status NoSpace(std::string msg) { return {StatusCode::kNoSpace, std::move(msg)}; }
  static Status NotSupported(std::string msg) {
    return {StatusCode::kNotSupported, std::move(msg)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "io error: <message>", for logs and the CLI's one-line errors.
  std::string ToString() const;

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { assert(ok()); return *value_; }
  const T& value() const { assert(ok()); return *value_; }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

#define CACHECORE_RETURN_IF_ERROR(expr) \
  do {                                  \
    ::cachecore::Status _s = (expr);    \
    if (!_s.ok()) return _s;            \
  } while (0)

}  // namespace cachecore
