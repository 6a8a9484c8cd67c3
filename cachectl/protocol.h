// The control protocol between cachectl and a cache's daemon, and the exit
// codes of every cachectl command. Both sides link this library; the wire
// format is produced and parsed here and nowhere else.
//
// Wire format (text, one request per connection; both sides ship together,
// so there is no negotiation beyond the tag):
//   request  "cachectl/2 VERB [ARG...]\n"
//   answer   "progress LEFT TOTAL\n"   (flush, detach, set --mode: dirty lines)
//            "data KEY=VALUE\n"        (the verb's reply, in order)
//            then exactly one "ok\n" or "error CODE MESSAGE\n", CODE being the
//            exit code the CLI returns.
// Every size on the wire is in bytes. Decoding never trusts its input: it
// returns kInvalidArgument with one line saying what is wrong.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "cachecore/engine/cache_mode.h"
#include "cachecore/placement/placement.h"
#include "cachecore/base/status.h"

namespace cachectl {

// Exit codes, documented in docs/usage.md. Unscoped so that a command can
// return one as its int exit status; the daemon sends them in error lines.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,    // an I/O failure (or check found problems)
  kExitUsage = 2,     // the command line, or a request, is wrong
  kExitNotFound = 3,  // no such cache, device or running daemon
  kExitRefused = 4,   // in use, a mismatch, a permission
};

// The exit code for a Status from the engine or the system (kExitOk for OK).
ExitCode ExitCodeOf(const cachecore::Status& status);
// The other way, for a failure that crossed a pipe or socket as CODE and
// MESSAGE: a Status whose ExitCodeOf is `code`. `code` must not be kExitOk.
cachecore::Status StatusOfExitCode(ExitCode code, std::string message);

constexpr char kProtocolTag[] = "cachectl/2";
// The longest line either side sends or reads, '\n' excluded; longer text
// (an error message, a path) is cut when encoded.
constexpr size_t kMaxLineBytes = 64 * 1024;
// The most data lines a reply may carry (a reader stops past this).
constexpr size_t kMaxReplyLines = 1 << 16;

// ---- Requests: one struct per verb.

struct StatsRequest {
  bool reset = false;  // zero the counters after reporting them (root only)
};
struct FlushRequest {};
struct DetachRequest {
  bool wipe = false;  // then leave nothing of the volume's data on the cache device
};
struct StopRequest {};
// `set`: only the fields given change; the daemon applies them together,
// keeping the current value of each field not given.
struct SetRequest {
  // A volume's own settings (its sequential cutoff alone), or "": the cache's.
  std::string volume;
  std::optional<cachecore::CacheMode> mode;
  std::optional<uint64_t> seq_cutoff_bytes;  // 0: off
  bool seq_cutoff_of_cache = false;          // a volume's: the cache's cutoff again
  std::optional<uint32_t> dirty_target_pct, dirty_high_pct, dirty_low_pct, cleaner_batch_lines;
  // Given or not; when given, a window or none (placement off).
  std::optional<std::optional<cachecore::PlacementWindow>> placement_window;
  std::optional<uint64_t> placement_rate_bytes;  // bytes a second, above 0
  std::optional<uint64_t> ram_cache_bytes;       // the RAM tier's size, 0: off
  bool empty() const;
};
// kInvalidArgument for a set of a volume with the cache's settings, or of
// the cache with a volume's ("cache" cutoff).
cachecore::Status CheckVolumeSet(const SetRequest& r);
struct ByteRange {
  uint64_t offset = 0, length = 0;
};
// A range of volume `volume` ("": the cache's own), in its own bytes.
struct PinRequest {
  ByteRange range;
  std::string volume;
};
struct UnpinRequest {
  ByteRange range;
  std::string volume;
};
struct PinsRequest {};
struct MovementRequest {};
struct HistoryRequest {};
// `add`: another origin as volume `volume` of the running cache. The path
// travels hex-encoded (any bytes, one word).
struct AddVolumeRequest {
  std::string volume;
  std::string origin;  // an absolute path or an NBD URI
};
// `remove`: volume `volume`'s dirty data to its origin, then it leaves.
struct RemoveVolumeRequest {
  std::string volume;
};

using Request = std::variant<StatsRequest, FlushRequest, DetachRequest, StopRequest, SetRequest,
                             PinRequest, UnpinRequest, PinsRequest, MovementRequest, HistoryRequest,
                             AddVolumeRequest, RemoveVolumeRequest>;

// The request line, '\n' included.
std::string EncodeRequest(const Request& request);
// One request line without its '\n'. kInvalidArgument for another
// protocol, an unknown verb, a missing, extra or malformed argument.
cachecore::Result<Request> DecodeRequest(std::string_view line);
// Whether `request` changes the cache or its counters: the daemon serves
// it only to root or its own user.
bool ChangesCache(const Request& request);

// ---- Answer lines.

// Receives the progress lines of an answer: dirty lines left, and at the start.
using ProgressSink = std::function<void(uint64_t left, uint64_t total)>;

// One line of an answer, decoded.
struct ReplyLine {
  enum Kind { kProgress, kData, kOk, kError } kind = kOk;
  uint64_t left = 0, total = 0;     // kProgress
  std::string key, value;           // kData
  ExitCode exit_code = kExitOk;     // kError: never kExitOk
  std::string message;              // kError
};

std::string EncodeProgress(uint64_t left, uint64_t total);
// "ok" for OK, else "error CODE MESSAGE" (one line, '\n' included).
std::string EncodeEnd(const cachecore::Status& status);
// One answer line without its '\n'. kInvalidArgument for anything that is
// none of the four kinds.
cachecore::Result<ReplyLine> DecodeReplyLine(std::string_view line);

// ---- Replies: the data lines of an answer, typed per verb.

using Fields = std::vector<std::pair<std::string, std::string>>;

// stats: a key/value report, in the daemon's order. The CLI prints it as
// it comes (table, JSON, CSV), so it stays a list; docs/usage.md lists
// the keys. Dotted keys ("errors.cache.read") nest in JSON.
struct StatsReply {
  Fields fields;
  // The value of `key`, empty when absent.
  std::string Value(std::string_view key) const;
};

// pin and unpin: what is pinned after the change.
struct PinTotals {
  uint64_t pinned_bytes = 0, resident_bytes = 0, limit_bytes = 0;
};

struct PinsReply {
  PinTotals totals;
  std::vector<cachecore::PinnedRange> ranges;  // in their volume's own bytes
  std::vector<std::string> volumes;            // each range's volume ("": the cache's own)
};

struct MovementReply {
  cachecore::PlacementSettings placement;
  uint64_t region_bytes = 0;
  std::vector<cachecore::MovementHour> hours;
  std::vector<cachecore::HotRegion> hottest;
};

// One minute of a cache's day (stats --history): what happened in it, and
// the dirty lines at its end.
struct HistoryMinute {
  int64_t minute_start = 0;  // seconds since the epoch
  uint64_t read_hits = 0, read_misses = 0, write_hits = 0, write_misses = 0;  // 4 KiB blocks
  uint64_t dirty_lines = 0;
  uint64_t cleaner_writes = 0, cleaned_bytes = 0;
};

struct HistoryReply {
  uint64_t line_size = 0;
  std::vector<HistoryMinute> minutes;  // oldest first, at most a day of them
};

// What a daemon did on its way up that its starter should show (sent on
// the start-up pipe before "ok" or "error").
struct StartupReply {
  std::vector<std::string> notices;
};

// The data lines of each reply, '\n' terminated, in order.
std::string EncodeReply(const StatsReply& reply);
std::string EncodeReply(const PinTotals& reply);
std::string EncodeReply(const PinsReply& reply);
std::string EncodeReply(const MovementReply& reply);
std::string EncodeReply(const HistoryReply& reply);
std::string EncodeReply(const StartupReply& reply);

// A reply from its data lines (key, value). kInvalidArgument for a missing,
// unknown or malformed field.
cachecore::Result<StatsReply> DecodeStatsReply(const Fields& data);
cachecore::Result<PinTotals> DecodePinTotals(const Fields& data);
cachecore::Result<PinsReply> DecodePinsReply(const Fields& data);
cachecore::Result<MovementReply> DecodeMovementReply(const Fields& data);
cachecore::Result<HistoryReply> DecodeHistoryReply(const Fields& data);
cachecore::Result<StartupReply> DecodeStartupReply(const Fields& data);

// "off" or "HH:MM-HH:MM", as stats and the wire show a placement window.
std::string PlacementWindowText(const std::optional<cachecore::PlacementWindow>& window);

}  // namespace cachectl
