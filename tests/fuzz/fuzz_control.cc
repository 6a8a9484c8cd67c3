// Fuzz target: the control protocol's answers as the CLI reads them (lines
// from a daemon: progress, data, ok, error) and the typed replies built
// from their data lines. Whatever decodes must encode back to the same.
#include <string>
#include <string_view>

#include "protocol.h"

namespace {

using namespace cachectl;

// A reply that decodes re-encodes to lines that decode to the same reply.
template <typename T, typename Decode>
void CheckRoundTrip(const Fields& data, Decode decode) {
  cachecore::Result<T> r = decode(data);
  if (!r.ok()) return;
  std::string text = EncodeReply(r.value());
  Fields again;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    cachecore::Result<ReplyLine> line = DecodeReplyLine(std::string_view(text).substr(start, nl - start));
    if (!line.ok() || line->kind != ReplyLine::kData) __builtin_trap();
    again.emplace_back(line->key, line->value);
    start = nl + 1;
  }
  cachecore::Result<T> back = decode(again);
  if (!back.ok() || EncodeReply(back.value()) != text) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  Fields fields;
  size_t start = 0;
  while (start <= input.size() && fields.size() < kMaxReplyLines) {
    size_t nl = input.find('\n', start);
    std::string_view text = input.substr(start, nl == std::string_view::npos ? nl : nl - start);
    cachecore::Result<ReplyLine> line = DecodeReplyLine(text);
    if (line.ok() && line->kind == ReplyLine::kError && line->exit_code == kExitOk) __builtin_trap();  // never "failed with 0"
    if (line.ok() && line->kind == ReplyLine::kData) fields.emplace_back(line->key, line->value);
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  CheckRoundTrip<StatsReply>(fields, DecodeStatsReply);
  CheckRoundTrip<PinTotals>(fields, DecodePinTotals);
  CheckRoundTrip<PinsReply>(fields, DecodePinsReply);
  CheckRoundTrip<MovementReply>(fields, DecodeMovementReply);
  CheckRoundTrip<StartupReply>(fields, DecodeStartupReply);
  return 0;
}
