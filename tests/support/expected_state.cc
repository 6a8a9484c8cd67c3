#include "expected_state.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace cachecore::testing {

namespace {
std::string Tick(uint64_t t) {
  if (t == UINT64_MAX) return "open";
  std::string out = "t";
  out += std::to_string(t);  // appended apart: GCC 12's false -Wrestrict at -O3 (bug 105329)
  return out;
}
}  // namespace

ExpectedState::ExpectedState(uint64_t sectors) : sectors_(sectors), state_(sectors) {}

uint64_t ExpectedState::Begin(uint64_t first, uint64_t count, const Op& op) {
  std::lock_guard lock(mu_);
  const uint64_t handle = ops_.size();
  ops_.push_back(op);
  ops_.back().start = Now();  // under mu_: every sector sees it before the I/O starts
  for (uint64_t s = first; s < first + count; ++s) {
    state_[s].ops.push_back(static_cast<uint32_t>(handle));
    std::vector<uint64_t>& ever = state_[s].ever;
    if (!op.trim && std::find(ever.begin(), ever.end(), op.id) == ever.end()) ever.push_back(op.id);
  }
  return handle;
}

uint64_t ExpectedState::BeginWrite(uint64_t first, uint64_t count, uint64_t id, bool fua) {
  return Begin(first, count, Op{id, 0, kOpen, fua, false});
}

uint64_t ExpectedState::BeginTrim(uint64_t first, uint64_t count) {
  return Begin(first, count, Op{0, 0, kOpen, false, true});
}

void ExpectedState::Acknowledge(uint64_t handle) {
  std::lock_guard lock(mu_);
  ops_[handle].end = Now();
}

void ExpectedState::SyncCompleted(uint64_t start) {
  std::lock_guard lock(mu_);
  durable_before_ = std::max(durable_before_, start);
}

template <typename Final>
ExpectedState::Judgement ExpectedState::Judge(const Sector& s, uint64_t got, uint64_t horizon,
                                              Final final_op) const {
  Judgement j;
  // The latest issue tick of a write that can no longer be undone: anything
  // that returned before it is superseded.
  j.floor = s.settled_tick;
  for (uint32_t i : s.ops) {
    const Op& op = ops_[i];
    if (!op.trim && op.start <= horizon && final_op(op)) j.floor = std::max(j.floor, op.start);
  }
  const bool settled_stands = s.settled_tick >= j.floor;
  j.allowed = settled_stands && got == s.settled_id;
  j.trimmed = settled_stands && s.unspecified;
  for (uint32_t i : s.ops) {
    const Op& op = ops_[i];
    if (op.start > horizon || (op.end != kOpen && op.end < j.floor)) continue;  // unseen or superseded
    if (op.trim) j.trimmed = true;
    else if (op.id == got) j.allowed = true;
  }
  if (j.trimmed && (got == 0 || std::find(s.ever.begin(), s.ever.end(), got) != s.ever.end())) {
    j.allowed = true;
  }
  return j;
}

bool ExpectedState::Durable(const Op& op) const {
  return op.end != kOpen && (op.fua || op.end < durable_before_);
}

std::optional<std::string> ExpectedState::CheckRead(uint64_t sector, uint64_t got, uint64_t start,
                                                    uint64_t end) {
  std::lock_guard lock(mu_);
  const Sector& s = state_[sector];
  Judgement j = Judge(s, got, end, [&](const Op& op) { return op.end != kOpen && op.end < start; });
  if (j.allowed) return std::nullopt;
  return Describe(s, j.floor);
}

std::optional<std::string> ExpectedState::CheckRecovered(uint64_t sector, uint64_t got) {
  std::lock_guard lock(mu_);
  const Sector& s = state_[sector];
  Judgement j = Judge(s, got, UINT64_MAX, [&](const Op& op) { return Durable(op); });
  if (j.allowed) return std::nullopt;
  return Describe(s, j.floor);
}

bool ExpectedState::Unspecified(uint64_t sector) {
  std::lock_guard lock(mu_);
  const Sector& s = state_[sector];
  return Judge(s, 0, UINT64_MAX, [&](const Op& op) { return Durable(op); }).trimmed;
}

void ExpectedState::Settle(uint64_t sector, uint64_t got) {
  std::lock_guard lock(mu_);
  Sector& s = state_[sector];
  // Trimmed content stays unspecified until a write replaces it, restart
  // or not: what was read is one possibility, not a promise.
  s.unspecified = Judge(s, got, UINT64_MAX, [&](const Op& op) { return Durable(op); }).trimmed;
  s.settled_id = got;
  s.settled_tick = Now();
  s.ops.clear();
}

void ExpectedState::ForgetOperations() {
  std::lock_guard lock(mu_);
  for (const Sector& s : state_) {
    if (!s.ops.empty()) std::abort();  // a sector not settled would lose its history
  }
  ops_.clear();
}

// The sector's history since its last check, for a failure message.
std::string ExpectedState::Describe(const Sector& s, uint64_t floor) const {
  std::ostringstream out;
  out << "settled value " << s.settled_id << (s.unspecified ? " (unspecified: trimmed)" : "")
      << " at " << Tick(s.settled_tick) << (s.settled_tick < floor ? " (superseded)" : "")
      << "; since then:";
  size_t shown = 0;
  for (uint32_t i : s.ops) {
    if (++shown > 40) {
      out << " ... (" << s.ops.size() << " in all)";
      break;
    }
    const Op& op = ops_[i];
    out << (op.trim ? " trim" : " write " + std::to_string(op.id)) << " [" << Tick(op.start) << ","
        << Tick(op.end) << "]" << (op.fua ? " fua" : "")
        << (op.end != kOpen && op.end < floor ? " (superseded)" : "") << ";";
  }
  if (s.ops.empty()) out << " nothing;";
  out << " durable floor " << Tick(floor) << ", syncs durable before " << Tick(durable_before_)
      << "; values ever written:";
  for (size_t k = 0; k < s.ever.size() && k < 40; ++k) out << " " << s.ever[k];
  return out.str();
}

}  // namespace cachecore::testing
