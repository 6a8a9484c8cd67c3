// Fuzz target: a control request as any client of the control socket may
// send it, through the daemon's dispatch (decode, permission check,
// routing, the answer) up to the cache, which is a fake here. Checks:
// a request that decodes re-encodes to itself; a caller who may not change
// the cache never reaches a changing call; every answer is well-formed
// lines ending in exactly one "ok" or "error", and an "ok" answer's data
// decodes as the verb's reply.
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "protocol.h"
#include "request_dispatch.h"

namespace {

using namespace cachectl;
using cachecore::Result;
using cachecore::Status;

// Answers every call; the request's own bytes come back in text fields
// and error messages, so that encoding arbitrary text is fuzzed too.
class FakeCache : public ControlTarget {
 public:
  explicit FakeCache(std::string_view echo) : echo_(echo) {}
  bool changed = false;

  Result<StatsReply> Stats(bool reset) override {
    changed = changed || reset;
    return StatsReply{{{"state", "running"}, {"frontend", echo_}}};
  }
  Status Flush(const ProgressSink& progress) override {
    progress(1, 2);
    return Change();
  }
  Status Detach(bool, const ProgressSink& progress) override {
    progress(0, 0);
    return Change();
  }
  Status Stop() override { return Change(); }
  Status Set(const SetRequest&, const ProgressSink&) override { return Change(); }
  Result<PinTotals> Pin(const ByteRange& r, const std::string&) override {
    CACHECORE_RETURN_IF_ERROR(Change());
    return PinTotals{r.length, r.offset, 1};
  }
  Result<PinTotals> Unpin(const ByteRange& r, const std::string& volume) override { return Pin(r, volume); }
  Result<PinsReply> Pins() override { return PinsReply{{1, 2, 3}, {{4, 5, 6}, {7, 8, 9}}, {"", "vol"}}; }
  Result<MovementReply> Movement() override {
    MovementReply m;
    m.hours.push_back({-3600, 1, 2, 3, 4, 5, 6, 7});
    m.hottest.push_back({1, 2, 3, 4});
    return m;
  }
  Result<HistoryReply> History() override { return HistoryReply{4096, {{-60, 1, 2, 3, 4, 5, 6, 7}}}; }
  Status AddVolume(const std::string&, const std::string&) override { return Status::Ok(); }
  Status RemoveVolume(const std::string&, const ProgressSink& progress) override {
    progress(0, 1);
    return Status::Ok();
  }

 private:
  Status Change() {
    changed = true;
    return echo_.size() % 2 ? Status::Busy(std::string(echo_)) : Status::Ok();
  }
  std::string echo_;
};

// The data lines of an "ok" answer decode as what the request asked for.
bool ReplyDecodes(const Request& request, const Fields& data) {
  return std::visit(
      [&](const auto& r) -> bool {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, StatsRequest>) return DecodeStatsReply(data).ok();
        else if constexpr (std::is_same_v<T, PinRequest> || std::is_same_v<T, UnpinRequest>) return DecodePinTotals(data).ok();
        else if constexpr (std::is_same_v<T, PinsRequest>) return DecodePinsReply(data).ok();
        else if constexpr (std::is_same_v<T, MovementRequest>) return DecodeMovementReply(data).ok();
        else if constexpr (std::is_same_v<T, HistoryRequest>) return DecodeHistoryReply(data).ok();
        else return data.empty();
      },
      request);
}

void CheckRoundTrip(std::string_view line) {
  Result<Request> r = DecodeRequest(line);
  if (!r.ok()) return;
  std::string again = EncodeRequest(r.value());
  Result<Request> back = DecodeRequest(std::string_view(again).substr(0, again.size() - 1));
  if (!back.ok() || EncodeRequest(back.value()) != again) __builtin_trap();
}

void CheckServe(std::string_view line, bool may_change) {
  FakeCache cache(line.substr(0, 256));
  std::string answer;
  ServeRequest(line, may_change, cache, [&](const std::string& text) { answer += text; });
  if (!may_change && cache.changed) __builtin_trap();  // a change without permission
  if (answer.empty() || answer.back() != '\n') __builtin_trap();
  Fields data;
  size_t start = 0, ends = 0;
  ReplyLine last;
  while (start < answer.size()) {
    size_t nl = answer.find('\n', start);
    Result<ReplyLine> decoded = DecodeReplyLine(std::string_view(answer).substr(start, nl - start));
    if (!decoded.ok() || ends > 0) __builtin_trap();  // malformed, or a line after the end
    last = decoded.value();
    if (last.kind == ReplyLine::kOk || last.kind == ReplyLine::kError) ++ends;
    if (last.kind == ReplyLine::kData) data.emplace_back(last.key, last.value);
    start = nl + 1;
  }
  if (ends != 1) __builtin_trap();
  Result<Request> request = DecodeRequest(line);
  if (last.kind == ReplyLine::kOk && (!request.ok() || !ReplyDecodes(request.value(), data))) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view line(reinterpret_cast<const char*>(data), size);
  CheckRoundTrip(line);
  CheckServe(line, false);
  CheckServe(line, true);
  return 0;
}
