#include "request_dispatch.h"

#include <variant>

namespace cachectl {

using cachecore::Result;
using cachecore::Status;

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

// A reply's data lines when there is one; its Status either way.
template <typename T>
Status SendReply(const Result<T>& reply, const LineSink& send) {
  if (reply.ok()) send(EncodeReply(reply.value()));
  return reply.status();
}

Status Run(const Request& request, ControlTarget& target, const LineSink& send) {
  ProgressSink progress = [&send](uint64_t left, uint64_t total) { send(EncodeProgress(left, total)); };
  return std::visit(
      Overloaded{
          [&](const StatsRequest& r) { return SendReply(target.Stats(r.reset), send); },
          [&](const FlushRequest&) { return target.Flush(progress); },
          [&](const DetachRequest& r) { return target.Detach(r.wipe, progress); },
          [&](const StopRequest&) { return target.Stop(); },
          [&](const SetRequest& r) { return target.Set(r, progress); },
          [&](const PinRequest& r) { return SendReply(target.Pin(r.range, r.volume), send); },
          [&](const UnpinRequest& r) { return SendReply(target.Unpin(r.range, r.volume), send); },
          [&](const PinsRequest&) { return SendReply(target.Pins(), send); },
          [&](const MovementRequest&) { return SendReply(target.Movement(), send); },
          [&](const HistoryRequest&) { return SendReply(target.History(), send); },
          [&](const AddVolumeRequest& r) { return target.AddVolume(r.volume, r.origin); },
          [&](const RemoveVolumeRequest& r) { return target.RemoveVolume(r.volume, progress); },
      },
      request);
}

}  // namespace

void ServeRequest(std::string_view line, bool caller_may_change, ControlTarget& target, const LineSink& send) {
  Result<Request> request = DecodeRequest(line);
  Status s = request.status();
  if (s.ok() && ChangesCache(request.value()) && !caller_may_change) {
    s = Status::Busy("permission denied: run as root");
  }
  if (s.ok()) s = Run(request.value(), target, send);
  send(EncodeEnd(s));
}

}  // namespace cachectl
