#include "cachecore/base/status.h"

namespace cachecore {

namespace {
const char* CodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kCorruption: return "corruption";
    case StatusCode::kMismatch: return "mismatch";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kBusy: return "busy";
    case StatusCode::kNoSpace: return "no space";
    case StatusCode::kNotSupported: return "not supported";
  }
  return "unknown";
}
}  // namespace

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(CodeName(code_)) + ": " + message_;
}

}  // namespace cachecore
