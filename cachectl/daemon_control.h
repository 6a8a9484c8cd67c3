// The control requests of a running daemon (request_dispatch.h), carried out
// on its engine. Internal to the cachectl executable.
#pragma once

#include <utility>

#include "daemon_state.h"
#include "request_dispatch.h"

namespace cachectl {

// One per request thread, over the daemon's shared state. Every call uses
// the engine under a shared lock on d.engine_mu (so it is never taken away
// mid-call) and answers kBusy once shutdown has taken it.
class DaemonControl : public ControlTarget {
 public:
  explicit DaemonControl(Daemon& d) : d_(d) {}

  cachecore::Result<StatsReply> Stats(bool reset) override;
  // The report with every counter a `stats --reset` zeroes counted from
  // the daemon's start (for the history, the error watch and /metrics,
  // which must not go back). Ratios stay as Stats has them.
  cachecore::Result<StatsReply> StatsSinceStart();
  cachecore::Status Flush(const ProgressSink& progress) override;
  cachecore::Status Detach(bool wipe, const ProgressSink& progress) override;
  cachecore::Status Stop() override;
  // Atomic with respect to every other Set (d.settings_mu, d.mode_mu): the
  // cleaner and placement fields not given keep the values in force when
  // this Set runs, never values read before another Set changed them.
  cachecore::Status Set(const SetRequest& request, const ProgressSink& progress) override;
  cachecore::Result<PinTotals> Pin(const ByteRange& range, const std::string& volume) override;
  cachecore::Result<PinTotals> Unpin(const ByteRange& range, const std::string& volume) override;
  cachecore::Result<PinsReply> Pins() override;
  cachecore::Result<MovementReply> Movement() override;
  cachecore::Result<HistoryReply> History() override;
  cachecore::Status AddVolume(const std::string& volume, const std::string& origin) override;
  cachecore::Status RemoveVolume(const std::string& volume, const ProgressSink& progress) override;

 private:
  // Runs fn(engine) while the engine is there; kBusy after shutdown.
  template <typename Fn>
  auto WithEngine(Fn fn) -> decltype(fn(std::declval<Engine&>()));

  Daemon& d_;
};

}  // namespace cachectl
