// Line parsers of the trace formats (trace_formats.cc); TraceReader runs them.
#pragma once

#include <string>
#include <string_view>

#include "cachecore/planning/trace_reader.h"

namespace cachecore {

enum class LineKind {
  kRecord,      // `record` is filled
  kSkip,        // a blank line or a header
  kOtherEvent,  // a valid line that is not a data request (blkparse: not Q, or a flush)
  kEnd,         // the rest of the file is not events (blkparse's summary)
};

// A whole decimal number: false on anything else (sign, space, overflow).
bool ParseDecimal(std::string_view text, uint64_t* out);

// One line of blkparse's default output. Requests are taken at their Q
// (queued) event, so that each counts once; discards and flushes are left out.
Result<LineKind> ParseBlkparseLine(const std::string& line, TraceRecord* record);
// One line of an MSR Cambridge trace: Timestamp (Windows filetime),
// Hostname, DiskNumber, Type (Read/Write), Offset, Size, ResponseTime.
Result<LineKind> ParseMsrLine(const std::string& line, TraceRecord* record);

}  // namespace cachecore
