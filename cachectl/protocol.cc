#include "protocol.h"

#include "cachecore/devices/nbd_device.h"  // IsNbdUri
#include "paths.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <functional>

namespace cachectl {

using cachecore::CacheMode;
using cachecore::PlacementWindow;
using cachecore::Result;
using cachecore::Status;
using cachecore::StatusCode;

ExitCode ExitCodeOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kNotFound: return kExitNotFound;
    case StatusCode::kBusy:
    case StatusCode::kMismatch:
    case StatusCode::kCorruption: return kExitRefused;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return kExitUsage;
    default: return kExitFailed;
  }
}

Status StatusOfExitCode(ExitCode code, std::string message) {
  assert(code != kExitOk);
  switch (code) {
    case kExitNotFound: return Status::NotFound(std::move(message));
    case kExitRefused: return Status::Busy(std::move(message));
    case kExitUsage: return Status::InvalidArgument(std::move(message));
    default: return Status::IoError(std::move(message));
  }
}

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

using Words = std::vector<std::string_view>;

// Untrusted text quoted back in an error message: short, one line.
std::string Quote(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, 64)) out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  return out + (text.size() > 64 ? "...'" : "'");
}

// `text` made safe to put on one line: no line breaks, at most `max` bytes.
std::string OneLine(std::string_view text, size_t max) {
  std::string out(text.substr(0, max));
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

// Splits on single spaces; an empty word (two spaces, a trailing space) is
// malformed, so that every request has exactly one spelling.
Result<Words> SplitWords(std::string_view text) {
  Words words;
  size_t start = 0;
  while (true) {
    size_t space = text.find(' ', start);
    std::string_view word = text.substr(start, space == std::string_view::npos ? space : space - start);
    if (word.empty()) return Status::InvalidArgument("malformed request: an empty word");
    words.push_back(word);
    if (space == std::string_view::npos) return words;
    start = space + 1;
  }
}

// Decimal digits only (no sign, no space), within uint64_t.
Result<uint64_t> DecodeNumber(std::string_view text) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || text[0] == '+' || text[0] == '-' || ec != std::errc() || ptr != end) {
    return Status::InvalidArgument("not a byte count or number: " + Quote(text));
  }
  return v;
}

Result<int64_t> DecodeSigned(std::string_view text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return Status::InvalidArgument("not a number: " + Quote(text));
  }
  return v;
}

Result<uint32_t> DecodeNumber32(std::string_view text) {
  Result<uint64_t> v = DecodeNumber(text);
  if (!v.ok()) return v.status();
  if (v.value() > UINT32_MAX) return Status::InvalidArgument("number too large: " + Quote(text));
  return static_cast<uint32_t>(v.value());
}

// "A,B,C": exactly `n` numbers.
Status DecodeList(std::string_view text, uint64_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    size_t comma = i + 1 < n ? text.find(',') : text.size();
    if (comma == std::string_view::npos) return Status::InvalidArgument("expected " + std::to_string(n) + " numbers");
    Result<uint64_t> v = DecodeNumber(text.substr(0, comma));
    if (!v.ok()) return v.status();
    out[i] = v.value();
    text.remove_prefix(std::min(text.size(), comma + 1));
  }
  return Status::Ok();
}

std::string Join(std::initializer_list<uint64_t> values) {
  std::string out;
  for (uint64_t v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);  // appended apart: GCC 12 warns falsely (-Wrestrict, bug 105329) on "," + string
  }
  return out;
}

// ---- set's fields: KEY=VALUE words, each key at most once.

std::string EncodeSet(const SetRequest& r) {
  std::string out = "set";
  auto add = [&](const char* key, const std::string& value) { out += std::string(" ") + key + "=" + value; };
  if (!r.volume.empty()) add("volume", r.volume);
  if (r.mode) add("mode", cachecore::CacheModeName(*r.mode));
  if (r.seq_cutoff_bytes) add("seq_cutoff", std::to_string(*r.seq_cutoff_bytes));
  if (r.seq_cutoff_of_cache) add("seq_cutoff", "cache");
  if (r.dirty_target_pct) add("dirty_target", std::to_string(*r.dirty_target_pct));
  if (r.dirty_high_pct) add("dirty_high", std::to_string(*r.dirty_high_pct));
  if (r.dirty_low_pct) add("dirty_low", std::to_string(*r.dirty_low_pct));
  if (r.cleaner_batch_lines) add("cleaner_batch", std::to_string(*r.cleaner_batch_lines));
  if (r.placement_window) add("placement_window", PlacementWindowText(*r.placement_window));
  if (r.placement_rate_bytes) add("placement_rate", std::to_string(*r.placement_rate_bytes));
  if (r.ram_cache_bytes) add("ram_cache", std::to_string(*r.ram_cache_bytes));
  return out;
}

Result<std::optional<PlacementWindow>> DecodeWindow(std::string_view text) {
  if (text == "off") return std::optional<PlacementWindow>();
  Result<PlacementWindow> w = cachecore::ParsePlacementWindow(std::string(text));
  if (!w.ok()) return w.status();
  return std::optional<PlacementWindow>(w.value());
}

// Sets `*field` from `value` with `decode`; a field given twice is malformed.
template <typename T, typename Decode>
Status Take(std::optional<T>* field, std::string_view value, Decode decode) {
  if (field->has_value()) return Status::InvalidArgument("a field given twice");
  auto v = decode(value);
  if (!v.ok()) return v.status();
  *field = std::move(v.value());
  return Status::Ok();
}

Status DecodeSetField(std::string_view key, std::string_view value, SetRequest* r) {
  if (key == "mode") return Take(&r->mode, value, [](std::string_view v) { return cachecore::ParseCacheMode(std::string(v)); });
  if (key == "volume") {
    if (!r->volume.empty()) return Status::InvalidArgument("a field given twice");
    CACHECORE_RETURN_IF_ERROR(CheckName(std::string(value)));
    r->volume = std::string(value);
    return Status::Ok();
  }
  if (key == "seq_cutoff" && value == "cache") {
    if (r->seq_cutoff_bytes || r->seq_cutoff_of_cache) return Status::InvalidArgument("a field given twice");
    r->seq_cutoff_of_cache = true;
    return Status::Ok();
  }
  if (key == "seq_cutoff" && r->seq_cutoff_of_cache) return Status::InvalidArgument("a field given twice");
  if (key == "seq_cutoff") return Take(&r->seq_cutoff_bytes, value, DecodeNumber);
  if (key == "dirty_target") return Take(&r->dirty_target_pct, value, DecodeNumber32);
  if (key == "dirty_high") return Take(&r->dirty_high_pct, value, DecodeNumber32);
  if (key == "dirty_low") return Take(&r->dirty_low_pct, value, DecodeNumber32);
  if (key == "cleaner_batch") return Take(&r->cleaner_batch_lines, value, DecodeNumber32);
  if (key == "placement_window") return Take(&r->placement_window, value, DecodeWindow);
  if (key == "ram_cache") return Take(&r->ram_cache_bytes, value, DecodeNumber);
  if (key == "placement_rate") {
    CACHECORE_RETURN_IF_ERROR(Take(&r->placement_rate_bytes, value, DecodeNumber));
    if (*r->placement_rate_bytes == 0) return Status::InvalidArgument("the placement rate must be above 0");
    return Status::Ok();
  }
  return Status::InvalidArgument("unknown setting " + Quote(key));
}

}  // namespace

Status CheckVolumeSet(const SetRequest& r) {
  const bool others = r.mode || r.dirty_target_pct || r.dirty_high_pct || r.dirty_low_pct || r.cleaner_batch_lines ||
                      r.placement_window || r.placement_rate_bytes || r.ram_cache_bytes;
  if (!r.volume.empty() && others) {
    return Status::InvalidArgument("a volume has its own sequential cutoff alone; the other settings are the cache's");
  }
  if (r.volume.empty() && r.seq_cutoff_of_cache) {
    return Status::InvalidArgument("the cache's own cutoff is a size: 'cache' is for a volume's");
  }
  return Status::Ok();
}

namespace {

Result<Request> DecodeSet(const Words& args) {
  SetRequest r;
  for (std::string_view word : args) {
    size_t eq = word.find('=');
    if (eq == std::string_view::npos) return Status::InvalidArgument("set: expected KEY=VALUE, got " + Quote(word));
    Status s = DecodeSetField(word.substr(0, eq), word.substr(eq + 1), &r);
    if (!s.ok()) return Status::InvalidArgument("set " + Quote(word.substr(0, eq)) + ": " + s.message());
  }
  if (r.empty()) return Status::InvalidArgument("set: nothing to set");
  CACHECORE_RETURN_IF_ERROR(CheckVolumeSet(r));
  return Request(r);
}

// ---- The other verbs.

// VERB or "VERB WORD": whether WORD was there.
Result<bool> DecodeFlag(std::string_view verb, const Words& args, std::string_view word) {
  if (args.empty()) return false;
  if (args.size() == 1 && args[0] == word) return true;
  return Status::InvalidArgument(std::string(verb) + " takes nothing or '" + std::string(word) + "'");
}

Result<ByteRange> DecodeRange(std::string_view verb, const Words& args) {
  if (args.size() != 2) return Status::InvalidArgument(std::string(verb) + " needs OFFSET LENGTH");
  Result<uint64_t> offset = DecodeNumber(args[0]);
  Result<uint64_t> length = DecodeNumber(args[1]);
  if (!offset.ok() || !length.ok()) {
    return Status::InvalidArgument(std::string(verb) + ": " + (offset.ok() ? length : offset).status().message());
  }
  return ByteRange{offset.value(), length.value()};
}

std::string HexOf(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

Result<std::string> BytesOfHex(std::string_view hex) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (hex.empty() || hex.size() % 2 != 0 || hex.size() > 8192) return Status::InvalidArgument("malformed path");
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return Status::InvalidArgument("malformed path");
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

// add-volume VOL HEXPATH, remove-volume VOL.
Result<Request> DecodeVolumeVerb(std::string_view verb, const Words& args) {
  const bool add = verb == "add-volume";
  if (args.size() != (add ? 2u : 1u)) {
    return Status::InvalidArgument(std::string(verb) + (add ? " needs VOLUME ORIGIN" : " needs VOLUME"));
  }
  const std::string volume(args[0]);
  CACHECORE_RETURN_IF_ERROR(CheckName(volume));
  if (!add) return Request(RemoveVolumeRequest{volume});
  Result<std::string> origin = BytesOfHex(args[1]);
  if (!origin.ok()) return Status::InvalidArgument(std::string(verb) + ": " + origin.status().message());
  const bool uri = cachecore::IsNbdUri(origin.value());
  if (!uri && origin->front() != '/') {
    return Status::InvalidArgument(std::string(verb) + ": the origin must be an absolute path or an NBD URI");
  }
  if (std::any_of(origin->begin(), origin->end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
    return Status::InvalidArgument(std::string(verb) + ": the origin's name holds a control character");
  }
  return Request(AddVolumeRequest{volume, origin.value()});
}

Result<Request> DecodeVerb(std::string_view verb, const Words& args) {
  auto bare = [&](Request r) -> Result<Request> {
    if (!args.empty()) return Status::InvalidArgument(std::string(verb) + " takes no arguments");
    return r;
  };
  if (verb == "stats" || verb == "detach") {
    Result<bool> flag = DecodeFlag(verb, args, verb == "stats" ? "reset" : "wipe");
    if (!flag.ok()) return flag.status();
    if (verb == "stats") return Request(StatsRequest{flag.value()});
    return Request(DetachRequest{flag.value()});
  }
  if (verb == "pin" || verb == "unpin") {
    // OFFSET LENGTH [VOLUME]
    std::string volume;
    Words range_words = args;
    if (args.size() == 3) {
      volume = std::string(args[2]);
      CACHECORE_RETURN_IF_ERROR(CheckName(volume));
      range_words.pop_back();
    }
    Result<ByteRange> range = DecodeRange(verb, range_words);
    if (!range.ok()) return range.status();
    if (verb == "pin") return Request(PinRequest{range.value(), volume});
    return Request(UnpinRequest{range.value(), volume});
  }
  if (verb == "set") return DecodeSet(args);
  if (verb == "flush") return bare(FlushRequest{});
  if (verb == "stop") return bare(StopRequest{});
  if (verb == "pins") return bare(PinsRequest{});
  if (verb == "movement") return bare(MovementRequest{});
  if (verb == "history") return bare(HistoryRequest{});
  if (verb == "add-volume" || verb == "remove-volume") return DecodeVolumeVerb(verb, args);
  return Status::InvalidArgument("unknown control command " + Quote(verb));
}

// ---- Replies: a field table per reply, checked against what arrived.

struct FieldRule {
  std::string_view key;
  bool repeated;  // any number of times; otherwise exactly once
  std::function<Status(std::string_view value)> take;
};

Status DecodeFields(const Fields& data, const std::vector<FieldRule>& rules) {
  std::vector<size_t> seen(rules.size());
  for (const auto& field : data) {
    const std::string& key = field.first;  // a plain name: lambdas may not capture a binding (clang 14)
    const std::string& value = field.second;
    auto rule = std::find_if(rules.begin(), rules.end(), [&](const FieldRule& r) { return r.key == key; });
    if (rule == rules.end()) return Status::InvalidArgument("unexpected field " + Quote(key));
    size_t i = static_cast<size_t>(rule - rules.begin());
    if (!rule->repeated && seen[i]++ > 0) return Status::InvalidArgument("field " + Quote(key) + " given twice");
    Status s = rule->take(value);
    if (!s.ok()) return Status::InvalidArgument("field " + Quote(key) + ": " + s.message());
  }
  for (size_t i = 0; i < rules.size(); ++i) {
    if (!rules[i].repeated && seen[i] == 0) return Status::InvalidArgument("missing field " + Quote(rules[i].key));
  }
  return Status::Ok();
}

FieldRule NumberField(std::string_view key, uint64_t* out) {
  return {key, false, [out](std::string_view v) {
            Result<uint64_t> n = DecodeNumber(v);
            if (n.ok()) *out = n.value();
            return n.status();
          }};
}

std::vector<FieldRule> PinTotalRules(PinTotals* t) {
  return {NumberField("pinned_bytes", &t->pinned_bytes), NumberField("pinned_resident_bytes", &t->resident_bytes),
          NumberField("pin_limit_bytes", &t->limit_bytes)};
}

void AddData(std::string* out, std::string_view key, std::string_view value) {
  assert(!key.empty() && key.find_first_of("= \n") == std::string_view::npos);
  *out += "data " + std::string(key) + "=" + OneLine(value, kMaxLineBytes - key.size() - 6) + "\n";
}

std::string EncodeTotals(const PinTotals& t) {
  std::string out;
  AddData(&out, "pinned_bytes", std::to_string(t.pinned_bytes));
  AddData(&out, "pinned_resident_bytes", std::to_string(t.resident_bytes));
  AddData(&out, "pin_limit_bytes", std::to_string(t.limit_bytes));
  return out;
}

Status DecodeHour(std::string_view v, std::vector<cachecore::MovementHour>* hours) {
  size_t comma = v.find(',');
  Result<int64_t> start = DecodeSigned(v.substr(0, comma));
  if (!start.ok()) return start.status();
  if (comma == std::string_view::npos) return Status::InvalidArgument("expected 8 numbers");
  uint64_t n[7];
  CACHECORE_RETURN_IF_ERROR(DecodeList(v.substr(comma + 1), n, 7));
  hours->push_back({start.value(), n[0], n[1], n[2], n[3], n[4], n[5], n[6]});
  return Status::Ok();
}

}  // namespace

bool SetRequest::empty() const {
  return !mode && !seq_cutoff_bytes && !seq_cutoff_of_cache && !dirty_target_pct && !dirty_high_pct && !dirty_low_pct && !cleaner_batch_lines &&
         !placement_window && !placement_rate_bytes && !ram_cache_bytes;
}

std::string PlacementWindowText(const std::optional<PlacementWindow>& window) {
  return window ? cachecore::FormatPlacementWindow(*window) : "off";
}

std::string EncodeRequest(const Request& request) {
  auto range = [](const char* verb, const ByteRange& r, const std::string& volume) {
    return std::string(verb) + " " + std::to_string(r.offset) + " " + std::to_string(r.length) +
           (volume.empty() ? "" : " " + volume);
  };
  std::string words = std::visit(
      Overloaded{
          [](const StatsRequest& r) -> std::string { return r.reset ? "stats reset" : "stats"; },
          [](const FlushRequest&) -> std::string { return "flush"; },
          [](const DetachRequest& r) -> std::string { return r.wipe ? "detach wipe" : "detach"; },
          [](const StopRequest&) -> std::string { return "stop"; },
          [](const SetRequest& r) { return EncodeSet(r); },
          [&](const PinRequest& r) { return range("pin", r.range, r.volume); },
          [&](const UnpinRequest& r) { return range("unpin", r.range, r.volume); },
          [](const PinsRequest&) -> std::string { return "pins"; },
          [](const MovementRequest&) -> std::string { return "movement"; },
          [](const HistoryRequest&) -> std::string { return "history"; },
          [](const AddVolumeRequest& r) -> std::string { return "add-volume " + r.volume + " " + HexOf(r.origin); },
          [](const RemoveVolumeRequest& r) -> std::string { return "remove-volume " + r.volume; },
      },
      request);
  return std::string(kProtocolTag) + " " + words + "\n";
}

Result<Request> DecodeRequest(std::string_view line) {
  if (line.size() > kMaxLineBytes) return Status::InvalidArgument("request longer than " + std::to_string(kMaxLineBytes) + " bytes");
  const std::string_view tag = kProtocolTag;
  if (line.substr(0, tag.size()) != tag || line.substr(tag.size(), 1) != " ") {
    return Status::InvalidArgument(std::string("unsupported protocol (this daemon speaks ") + kProtocolTag + ")");
  }
  Result<Words> words = SplitWords(line.substr(tag.size() + 1));
  if (!words.ok()) return words.status();
  Words args(words->begin() + 1, words->end());
  return DecodeVerb(words->front(), args);
}

bool ChangesCache(const Request& request) {
  if (const auto* stats = std::get_if<StatsRequest>(&request)) return stats->reset;
  return !std::holds_alternative<PinsRequest>(request) && !std::holds_alternative<MovementRequest>(request) &&
         !std::holds_alternative<HistoryRequest>(request);
}

std::string EncodeProgress(uint64_t left, uint64_t total) {
  return "progress " + std::to_string(left) + " " + std::to_string(total) + "\n";
}

std::string EncodeEnd(const Status& status) {
  if (status.ok()) return "ok\n";
  return "error " + std::to_string(static_cast<int>(ExitCodeOf(status))) + " " +
         OneLine(status.message(), kMaxLineBytes - 16) + "\n";
}

Result<ReplyLine> DecodeReplyLine(std::string_view line) {
  ReplyLine r;
  auto malformed = [&] { return Status::InvalidArgument("malformed answer line " + Quote(line)); };
  if (line.size() > kMaxLineBytes) return malformed();
  if (line == "ok") return r;
  if (line.substr(0, 5) == "data ") {
    size_t eq = line.find('=', 5);
    if (eq == std::string_view::npos || eq == 5 || line.substr(5, eq - 5).find(' ') != std::string_view::npos) {
      return malformed();
    }
    r.kind = ReplyLine::kData;
    r.key = line.substr(5, eq - 5);
    r.value = line.substr(eq + 1);
    return r;
  }
  if (line.substr(0, 9) == "progress ") {
    size_t space = line.find(' ', 9);
    if (space == std::string_view::npos) return malformed();
    Result<uint64_t> left = DecodeNumber(line.substr(9, space - 9));
    Result<uint64_t> total = DecodeNumber(line.substr(space + 1));
    if (!left.ok() || !total.ok()) return malformed();
    r.kind = ReplyLine::kProgress;
    r.left = left.value();
    r.total = total.value();
    return r;
  }
  if (line.substr(0, 6) == "error ") {
    size_t space = line.find(' ', 6);
    Result<uint64_t> code = DecodeNumber(line.substr(6, space == std::string_view::npos ? space : space - 6));
    if (!code.ok() || code.value() < kExitFailed || code.value() > kExitRefused) return malformed();
    r.kind = ReplyLine::kError;
    r.exit_code = static_cast<ExitCode>(code.value());
    if (space != std::string_view::npos) r.message = line.substr(space + 1);
    return r;
  }
  return malformed();
}

std::string StatsReply::Value(std::string_view key) const {
  for (const auto& [k, v] : fields) {
    if (k == key) return v;
  }
  return "";
}

std::string EncodeReply(const StatsReply& reply) {
  std::string out;
  for (const auto& [k, v] : reply.fields) AddData(&out, k, v);
  return out;
}

std::string EncodeReply(const PinTotals& reply) { return EncodeTotals(reply); }

std::string EncodeReply(const PinsReply& reply) {
  std::string out = EncodeTotals(reply.totals);
  for (size_t i = 0; i < reply.ranges.size(); ++i) {
    const cachecore::PinnedRange& p = reply.ranges[i];
    AddData(&out, "pin", Join({p.offset, p.length, p.resident_bytes}));
    if (i < reply.volumes.size() && !reply.volumes[i].empty()) AddData(&out, "pin_volume", reply.volumes[i]);
  }
  return out;
}

std::string EncodeReply(const MovementReply& reply) {
  std::string out;
  AddData(&out, "placement_window", PlacementWindowText(reply.placement.window));
  AddData(&out, "placement_rate", std::to_string(reply.placement.rate_bytes_per_s));
  AddData(&out, "region_bytes", std::to_string(reply.region_bytes));
  for (const cachecore::MovementHour& h : reply.hours) {
    AddData(&out, "hour", std::to_string(h.hour_start) + "," +
                              Join({h.promotions, h.demotions, h.cleaner_writes, h.cleaned_bytes,
                                    h.placement_promotions, h.placement_demotions, h.pin_fills}));
  }
  for (const cachecore::HotRegion& r : reply.hottest) AddData(&out, "hot", Join({r.offset, r.length, r.accesses, r.resident_bytes}));
  return out;
}

std::string EncodeReply(const HistoryReply& reply) {
  std::string out;
  AddData(&out, "line_size", std::to_string(reply.line_size));
  for (const HistoryMinute& m : reply.minutes) {
    AddData(&out, "minute", std::to_string(m.minute_start) + "," +
                                Join({m.read_hits, m.read_misses, m.write_hits, m.write_misses, m.dirty_lines,
                                      m.cleaner_writes, m.cleaned_bytes}));
  }
  return out;
}

std::string EncodeReply(const StartupReply& reply) {
  std::string out;
  for (const std::string& notice : reply.notices) AddData(&out, "notice", notice);
  return out;
}

Result<StatsReply> DecodeStatsReply(const Fields& data) {
  if (data.empty()) return Status::InvalidArgument("an empty stats reply");
  return StatsReply{data};
}

Result<PinTotals> DecodePinTotals(const Fields& data) {
  PinTotals t;
  CACHECORE_RETURN_IF_ERROR(DecodeFields(data, PinTotalRules(&t)));
  return t;
}

Result<PinsReply> DecodePinsReply(const Fields& data) {
  PinsReply r;
  std::vector<FieldRule> rules = PinTotalRules(&r.totals);
  rules.push_back({"pin", true, [&r](std::string_view v) {
                     uint64_t n[3];
                     CACHECORE_RETURN_IF_ERROR(DecodeList(v, n, 3));
                     r.ranges.push_back({n[0], n[1], n[2]});
                     r.volumes.emplace_back();
                     return Status::Ok();
                   }});
  rules.push_back({"pin_volume", true, [&r](std::string_view v) {  // the volume of the range before it
                     if (r.volumes.empty() || !r.volumes.back().empty()) return Status::InvalidArgument("a stray pin_volume");
                     CACHECORE_RETURN_IF_ERROR(CheckName(std::string(v)));
                     r.volumes.back() = std::string(v);
                     return Status::Ok();
                   }});
  CACHECORE_RETURN_IF_ERROR(DecodeFields(data, rules));
  return r;
}

Result<MovementReply> DecodeMovementReply(const Fields& data) {
  MovementReply r;
  std::vector<FieldRule> rules = {
      {"placement_window", false, [&r](std::string_view v) {
         Result<std::optional<PlacementWindow>> w = DecodeWindow(v);
         if (w.ok()) r.placement.window = w.value();
         return w.status();
       }},
      NumberField("placement_rate", &r.placement.rate_bytes_per_s),
      NumberField("region_bytes", &r.region_bytes),
      {"hour", true, [&r](std::string_view v) { return DecodeHour(v, &r.hours); }},
      {"hot", true, [&r](std::string_view v) {
         uint64_t n[4];
         CACHECORE_RETURN_IF_ERROR(DecodeList(v, n, 4));
         r.hottest.push_back({n[0], n[1], n[2], n[3]});
         return Status::Ok();
       }},
  };
  CACHECORE_RETURN_IF_ERROR(DecodeFields(data, rules));
  return r;
}

Result<HistoryReply> DecodeHistoryReply(const Fields& data) {
  HistoryReply r;
  std::vector<FieldRule> rules = {
      NumberField("line_size", &r.line_size),
      {"minute", true, [&r](std::string_view v) {
         size_t comma = v.find(',');
         Result<int64_t> start = DecodeSigned(v.substr(0, comma));
         if (!start.ok()) return start.status();
         if (comma == std::string_view::npos) return Status::InvalidArgument("expected 8 numbers");
         uint64_t n[7];
         CACHECORE_RETURN_IF_ERROR(DecodeList(v.substr(comma + 1), n, 7));
         r.minutes.push_back({start.value(), n[0], n[1], n[2], n[3], n[4], n[5], n[6]});
         return Status::Ok();
       }},
  };
  CACHECORE_RETURN_IF_ERROR(DecodeFields(data, rules));
  return r;
}

Result<StartupReply> DecodeStartupReply(const Fields& data) {
  StartupReply r;
  std::vector<FieldRule> rules = {{"notice", true, [&r](std::string_view v) {
                                     r.notices.emplace_back(v);
                                     return Status::Ok();
                                   }}};
  CACHECORE_RETURN_IF_ERROR(DecodeFields(data, rules));
  return r;
}

}  // namespace cachectl
