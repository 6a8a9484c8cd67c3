// TraceReader: block-I/O traces in the CSV format of ../shared/traces
// ("ts_us,op,offset_bytes,length_bytes", op R or W, one header line), in
// blkparse's text output or in the MSR Cambridge CSV; plain or
// zstd-compressed (detected by the zstd magic, not the name).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cachecore/base/status.h"

namespace cachecore {

struct TraceRecord {
  uint64_t timestamp_us = 0;
  bool is_write = false;
  uint64_t offset = 0;  // bytes, any alignment
  uint64_t length = 0;  // bytes
};

// kCsv: the format above. kBlkparse: blkparse's default text output (each
// request at its Q event). kMsr: the MSR Cambridge traces' CSV.
enum class TraceFormat { kCsv, kBlkparse, kMsr };
// "csv", "blkparse" or "msr"; kInvalidArgument naming the choices otherwise.
Result<TraceFormat> ParseTraceFormat(const std::string& name);

class TraceReader {
 public:
  // kNotFound when the file cannot be opened (the message names it).
  static Result<std::unique_ptr<TraceReader>> Open(const std::string& path,
                                                   TraceFormat format = TraceFormat::kCsv);
  virtual ~TraceReader() = default;
  // Fills `record` and returns true; false at the end of the trace. A
  // malformed line is kInvalidArgument naming the file and line number.
  virtual Result<bool> Next(TraceRecord* record) = 0;
};

// Parses one CSV line (without its newline). kInvalidArgument on anything
// that is not four fields of the format; the message says which field.
Status ParseTraceLine(const std::string& line, TraceRecord* record);

}  // namespace cachecore
