// The trace formats other than our own CSV: blkparse's default text output
// (what `blktrace -d DEV -o - | blkparse -i -` prints on a user's volume)
// and the MSR Cambridge traces' CSV.
#include <charconv>
#include <string_view>
#include <vector>

#include "planning/trace_formats.h"

namespace cachecore {

bool ParseDecimal(std::string_view text, uint64_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

namespace {

std::vector<std::string_view> Split(std::string_view line, char sep, bool collapse) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (start <= line.size()) {
    size_t end = line.find(sep, start);
    if (end == std::string_view::npos) end = line.size();
    if (!collapse || end > start) fields.push_back(line.substr(start, end - start));
    start = end + 1;
  }
  return fields;
}

// "12.345678901" seconds to microseconds.
bool ParseSecondsToMicros(std::string_view text, uint64_t* us) {
  size_t dot = text.find('.');
  uint64_t whole = 0, frac = 0;
  std::string_view frac_text = dot == std::string_view::npos ? "" : text.substr(dot + 1);
  if (!ParseDecimal(text.substr(0, dot), &whole) || frac_text.size() > 9 ||
      (!frac_text.empty() && !ParseDecimal(frac_text, &frac))) {
    return false;
  }
  for (size_t i = frac_text.size(); i < 6; ++i) frac *= 10;
  for (size_t i = 6; i < frac_text.size(); ++i) frac /= 10;
  *us = whole * 1000000 + frac;
  return true;
}

bool IsDevice(std::string_view field) {  // "8,0"
  size_t comma = field.find(',');
  uint64_t n;
  return comma != std::string_view::npos && ParseDecimal(field.substr(0, comma), &n) &&
         ParseDecimal(field.substr(comma + 1), &n);
}

}  // namespace

Result<LineKind> ParseBlkparseLine(const std::string& line, TraceRecord* r) {
  std::vector<std::string_view> f = Split(line, ' ', true);
  if (f.empty()) return LineKind::kSkip;
  if (f[0].starts_with("CPU") || f[0] == "Total") return LineKind::kEnd;  // the summary
  // device cpu sequence time pid action rwbs sector + count [process]
  if (f.size() < 6 || !IsDevice(f[0])) {
    return Status::InvalidArgument("not a blkparse event line (device, cpu, sequence, time, pid, action, ...)");
  }
  if (f[5] != "Q") return LineKind::kOtherEvent;  // each request once: when it was queued
  uint64_t sector = 0, count = 0;
  if (f.size() < 10 || f[8] != "+" || !ParseDecimal(f[7], &sector) || !ParseDecimal(f[9], &count)) {
    return Status::InvalidArgument("a Q event without 'SECTOR + COUNT'");
  }
  if (!ParseSecondsToMicros(f[3], &r->timestamp_us)) return Status::InvalidArgument("time is not seconds");
  bool read = f[6].find('R') != std::string_view::npos, write = f[6].find('W') != std::string_view::npos;
  bool discard = f[6].find('D') != std::string_view::npos;
  if ((!read && !write) || discard || count == 0) return LineKind::kOtherEvent;  // flush, discard
  if (sector > (UINT64_MAX >> 10) || count > (1ull << 31)) return Status::InvalidArgument("sector out of range");
  r->is_write = write;
  r->offset = sector * 512;
  r->length = count * 512;
  return LineKind::kRecord;
}

Result<LineKind> ParseMsrLine(const std::string& line, TraceRecord* r) {
  // Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime
  std::vector<std::string_view> f = Split(line, ',', false);
  if (f.size() != 7) return Status::InvalidArgument("expected 7 comma-separated fields (MSR Cambridge)");
  uint64_t filetime = 0;  // 100 ns units
  if (!ParseDecimal(f[0], &filetime)) return Status::InvalidArgument("timestamp is not a number");
  if (f[3] == "Read" || f[3] == "read") r->is_write = false;
  else if (f[3] == "Write" || f[3] == "write") r->is_write = true;
  else return Status::InvalidArgument("type must be Read or Write");
  if (!ParseDecimal(f[4], &r->offset) || !ParseDecimal(f[5], &r->length)) {
    return Status::InvalidArgument("offset or size is not a number");
  }
  if (r->offset > (UINT64_MAX >> 1) || r->length > (1ull << 40)) {
    return Status::InvalidArgument("offset or size is out of range");
  }
  r->timestamp_us = filetime / 10;
  return LineKind::kRecord;
}

}  // namespace cachecore
