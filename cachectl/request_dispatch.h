// The daemon's side of the control protocol: one request line in, the
// answer lines out. What a request does to the cache is behind
// ControlTarget, so that decoding, the permission check, routing and the
// encoding of the answer are one piece of code that tests and the fuzzer
// run without a cache (tests/protocol_test.cc, tests/fuzz/fuzz_dispatch.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "protocol.h"

namespace cachectl {

// The operations of a running cache, one per verb. Each may be called from
// several request threads at once; the implementation serializes what must
// be (the daemon: daemon_control.h). `progress` may be called any number
// of times before the call returns.
class ControlTarget {
 public:
  virtual ~ControlTarget() = default;
  // The report; with `reset`, the counters are zeroed after it is taken.
  virtual cachecore::Result<StatsReply> Stats(bool reset) = 0;
  virtual cachecore::Status Flush(const ProgressSink& progress) = 0;
  // Flushes (with progress), then stops serving and releases the cache;
  // OK once the daemon has stopped.
  virtual cachecore::Status Detach(bool wipe, const ProgressSink& progress) = 0;
  // Stops serving, the cache kept warm; OK once the daemon has stopped.
  virtual cachecore::Status Stop() = 0;
  // Applies the fields given (at least one), the others kept.
  virtual cachecore::Status Set(const SetRequest& request, const ProgressSink& progress) = 0;
  // A range of volume `volume` ("": the cache's own), in its own bytes.
  virtual cachecore::Result<PinTotals> Pin(const ByteRange& range, const std::string& volume) = 0;
  virtual cachecore::Result<PinTotals> Unpin(const ByteRange& range, const std::string& volume) = 0;
  virtual cachecore::Result<PinsReply> Pins() = 0;
  virtual cachecore::Result<MovementReply> Movement() = 0;
  // The last day, a minute a row (stats --history).
  virtual cachecore::Result<HistoryReply> History() = 0;
  // Adds `origin` (an absolute path) as volume `volume`, served at once.
  virtual cachecore::Status AddVolume(const std::string& volume, const std::string& origin) = 0;
  // Ends the volume's clients, cleans it (with progress), releases it.
  virtual cachecore::Status RemoveVolume(const std::string& volume, const ProgressSink& progress) = 0;
};

// Sends each answer line ('\n' included) as it is ready.
using LineSink = std::function<void(const std::string& line)>;

// Decodes `line` (a request line without its '\n'), refuses a change when
// the caller may not make one (`caller_may_change`: root or the daemon's
// user), runs it on `target` and sends the answer to `send`: progress
// lines, the reply's data lines, and last exactly one "ok" or "error".
void ServeRequest(std::string_view line, bool caller_may_change, ControlTarget& target, const LineSink& send);

}  // namespace cachectl
