#include "placement_control.h"

#include <cstdio>
#include <sstream>

namespace cachectl {

using namespace cachecore;

namespace {

// "A B" as two byte counts; false for anything else.
bool TwoNumbers(const std::string& text, uint64_t* a, uint64_t* b) {
  std::istringstream in(text);
  std::string rest;
  return static_cast<bool>(in >> *a >> *b) && !(in >> rest);
}

std::string Join(std::initializer_list<uint64_t> values) {
  std::string out;
  for (uint64_t v : values) out += (out.empty() ? "" : ",") + std::to_string(v);
  return out;
}

void SendPinTotals(const PinReport& r, const DataSink& data) {
  data("pinned_bytes", std::to_string(r.pinned_bytes));
  data("pinned_resident_bytes", std::to_string(r.resident_bytes));
  data("pin_limit_bytes", std::to_string(r.limit_bytes));
}

void SendPlacementSettings(Engine& engine, const DataSink& data) {
  PlacementSettings p = engine.placement();
  data("placement_window", p.window ? FormatPlacementWindow(*p.window) : "off");
  data("placement_rate", std::to_string(p.rate_bytes_per_s));
}

void SendPins(Engine& engine, const DataSink& data) {
  PinReport r = engine.pins();
  SendPinTotals(r, data);
  for (const PinnedRange& p : r.ranges) data("pin", Join({p.offset, p.length, p.resident_bytes}));
}

void SendMovement(Engine& engine, const DataSink& data) {
  MovementReport m = engine.movement();
  SendPlacementSettings(engine, data);
  data("region_bytes", std::to_string(m.region_bytes));
  for (const MovementHour& h : m.hours) {
    data("hour", std::to_string(h.hour_start) + "," +
                     Join({h.promotions, h.demotions, h.cleaner_writes, h.cleaned_bytes,
                           h.placement_promotions, h.placement_demotions, h.pin_fills}));
  }
  for (const HotRegion& r : m.hottest) data("hot", Join({r.offset, r.length, r.accesses, r.resident_bytes}));
}

Status SetPlacement(Engine& engine, const std::string& args) {
  std::istringstream in(args);
  std::string window_text, rest;
  uint64_t rate = 0;
  if (!(in >> window_text >> rate) || (in >> rest)) {
    return Status::InvalidArgument("placement needs WINDOW|off RATE");
  }
  PlacementSettings s;
  s.rate_bytes_per_s = rate;
  if (window_text != "off") {
    Result<PlacementWindow> w = ParsePlacementWindow(window_text);
    if (!w.ok()) return w.status();
    s.window = w.value();
  }
  return engine.SetPlacement(s);
}

}  // namespace

void PlacementStats(Engine& engine, const DataSink& data) {
  SendPlacementSettings(engine, data);
  SendPinTotals(engine.pins(), data);
}

std::optional<Status> PlacementCommand(Engine& engine, const std::string& cmd, bool may_change,
                                       const DataSink& data) {
  std::string verb = cmd.substr(0, cmd.find(' '));
  std::string args = cmd.size() > verb.size() ? cmd.substr(verb.size() + 1) : "";
  if (verb == "pins") {
    SendPins(engine, data);
    return Status::Ok();
  }
  if (verb == "movement") {
    SendMovement(engine, data);
    return Status::Ok();
  }
  if (verb != "pin" && verb != "unpin" && verb != "placement") return std::nullopt;
  if (!may_change) return Status::Busy("permission denied: run as root");
  if (verb == "placement") return SetPlacement(engine, args);
  uint64_t offset = 0, length = 0;
  if (!TwoNumbers(args, &offset, &length)) return Status::InvalidArgument(verb + " needs OFFSET LENGTH");
  Status s = verb == "pin" ? engine.Pin(offset, length) : engine.Unpin(offset, length);
  if (s.ok()) SendPinTotals(engine.pins(), data);  // what is pinned now, for the answer
  return s;
}

}  // namespace cachectl
