#include "cachecore/planning/trace_reader.h"

#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "planning/trace_formats.h"

namespace cachecore {

namespace {

// Streams bytes out of a file, decompressing zstd frames when present.
class ByteSource {
 public:
  explicit ByteSource(FILE* f) : file_(f) {}
  ~ByteSource() {
    if (dctx_) ZSTD_freeDCtx(dctx_);
    std::fclose(file_);
  }

  Status Init() {
    unsigned char magic[4] = {0, 0, 0, 0};
    size_t n = std::fread(magic, 1, 4, file_);
    std::rewind(file_);
    if (n == 4 && magic[0] == 0x28 && magic[1] == 0xB5 && magic[2] == 0x2F && magic[3] == 0xFD) {
      dctx_ = ZSTD_createDCtx();
      in_.resize(ZSTD_DStreamInSize());
    }
    out_.resize(dctx_ ? ZSTD_DStreamOutSize() : (1 << 16));
    return Status::Ok();
  }

  // Next chunk of bytes; empty at the end.
  Result<std::pair<const char*, size_t>> Read() {
    if (!dctx_) {
      size_t n = std::fread(out_.data(), 1, out_.size(), file_);
      if (n == 0 && std::ferror(file_)) return Status::IoError(std::strerror(errno));
      return std::pair<const char*, size_t>{out_.data(), n};
    }
    while (true) {
      if (input_.pos == input_.size) {
        size_t n = std::fread(in_.data(), 1, in_.size(), file_);
        if (n == 0) {
          if (!frame_done_) return Status::InvalidArgument("the zstd stream is truncated");
          return std::pair<const char*, size_t>{out_.data(), 0};
        }
        input_ = {in_.data(), n, 0};
      }
      ZSTD_outBuffer output{out_.data(), out_.size(), 0};
      size_t rc = ZSTD_decompressStream(dctx_, &output, &input_);
      if (ZSTD_isError(rc)) return Status::InvalidArgument(ZSTD_getErrorName(rc));
      frame_done_ = rc == 0;
      if (output.pos > 0) return std::pair<const char*, size_t>{out_.data(), output.pos};
    }
  }

 private:
  FILE* file_;
  ZSTD_DCtx* dctx_ = nullptr;
  std::vector<char> in_, out_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  bool frame_done_ = true;
};

// Reads a trace line by line; the format says what each line is.
class LineTraceReader : public TraceReader {
 public:
  LineTraceReader(std::unique_ptr<ByteSource> src, std::string path, TraceFormat format)
      : src_(std::move(src)), path_(std::move(path)), format_(format) {}

  Result<bool> Next(TraceRecord* record) override {
    std::string line;
    while (!ended_) {
      Result<bool> got = NextLine(&line);
      if (!got.ok()) return got;
      if (!got.value()) break;
      ++line_number_;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      Result<LineKind> kind = ParseLine(line, record);
      if (!kind.ok()) {
        return Status::InvalidArgument(path_ + ":" + std::to_string(line_number_) + ": " +
                                       kind.status().message());
      }
      if (kind.value() == LineKind::kRecord) {
        ++records_;
        return true;
      }
      if (kind.value() == LineKind::kOtherEvent) ++other_events_;
      ended_ = kind.value() == LineKind::kEnd;
    }
    if (format_ == TraceFormat::kBlkparse && records_ == 0 && other_events_ > 0) {
      return Status::InvalidArgument(path_ + ": no Q (queued) read or write events; run blkparse "
                                     "without an action filter (or with -a queue)");
    }
    return false;
  }

 private:
  Result<LineKind> ParseLine(const std::string& line, TraceRecord* record) {
    if (format_ == TraceFormat::kBlkparse) return ParseBlkparseLine(line, record);
    if (line.empty()) return LineKind::kSkip;
    // Our CSV and MSR's may start with a header line.
    if (line_number_ == 1 && (line[0] < '0' || line[0] > '9')) return LineKind::kSkip;
    if (format_ == TraceFormat::kMsr) return ParseMsrLine(line, record);
    Status s = ParseTraceLine(line, record);
    if (!s.ok()) return s;
    return LineKind::kRecord;
  }

 private:
  Result<bool> NextLine(std::string* line) {
    line->clear();
    while (true) {
      if (pos_ == size_) {
        Result<std::pair<const char*, size_t>> chunk = src_->Read();
        if (!chunk.ok()) return Status::InvalidArgument(path_ + ": " + chunk.status().message());
        data_ = chunk->first;
        size_ = chunk->second;
        pos_ = 0;
        if (size_ == 0) return !line->empty();
      }
      const char* nl = static_cast<const char*>(std::memchr(data_ + pos_, '\n', size_ - pos_));
      size_t end = nl ? static_cast<size_t>(nl - data_) : size_;
      line->append(data_ + pos_, end - pos_);
      if (line->size() > 4096) return Status::InvalidArgument(path_ + ": a line is too long");
      pos_ = nl ? end + 1 : end;
      if (nl) return true;
    }
  }

  std::unique_ptr<ByteSource> src_;
  std::string path_;
  TraceFormat format_;
  bool ended_ = false;
  uint64_t records_ = 0, other_events_ = 0;
  const char* data_ = nullptr;
  size_t size_ = 0, pos_ = 0;
  uint64_t line_number_ = 0;
};

}  // namespace

Status ParseTraceLine(const std::string& line, TraceRecord* r) {
  const char* fields[4];
  size_t lengths[4];
  size_t start = 0;
  for (int i = 0; i < 4; ++i) {
    size_t comma = line.find(',', start);
    if (i < 3 && comma == std::string::npos) {
      return Status::InvalidArgument("expected 4 comma-separated fields");
    }
    size_t end = i < 3 ? comma : line.size();
    if (i == 3 && line.find(',', start) != std::string::npos) {
      return Status::InvalidArgument("more than 4 fields");
    }
    fields[i] = line.data() + start;
    lengths[i] = end - start;
    start = end + 1;
  }
  if (!ParseDecimal({fields[0], lengths[0]}, &r->timestamp_us)) {
    return Status::InvalidArgument("timestamp is not a number");
  }
  if (lengths[1] != 1 || (fields[1][0] != 'R' && fields[1][0] != 'W')) {
    return Status::InvalidArgument("op must be R or W");
  }
  r->is_write = fields[1][0] == 'W';
  if (!ParseDecimal({fields[2], lengths[2]}, &r->offset)) {
    return Status::InvalidArgument("offset is not a number");
  }
  if (!ParseDecimal({fields[3], lengths[3]}, &r->length)) {
    return Status::InvalidArgument("length is not a number");
  }
  if (r->offset > (UINT64_MAX >> 1) || r->length > (1ull << 40)) {
    return Status::InvalidArgument("offset or length is out of range");
  }
  return Status::Ok();
}

Result<TraceFormat> ParseTraceFormat(const std::string& name) {
  if (name == "csv") return TraceFormat::kCsv;
  if (name == "blkparse") return TraceFormat::kBlkparse;
  if (name == "msr") return TraceFormat::kMsr;
  return Status::InvalidArgument("unknown trace format '" + name + "' (csv, blkparse or msr)");
}

Result<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path, TraceFormat format) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::NotFound("cannot open trace " + path + ": " + std::strerror(errno));
  auto src = std::make_unique<ByteSource>(f);
  CACHECORE_RETURN_IF_ERROR(src->Init());
  return std::unique_ptr<TraceReader>(new LineTraceReader(std::move(src), path, format));
}

}  // namespace cachecore
