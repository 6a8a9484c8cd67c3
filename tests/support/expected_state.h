// ExpectedState: what a disk with a volatile write cache may return for each
// 512-byte sector, while many threads write, trim and flush it at once (the
// expected state of RocksDB's db_stress, for a block device).
//
// Time is a logical clock shared by every thread: an operation takes a tick
// just before it is issued and, when it returns OK, another just after. So
// "A returned before B was issued" is exactly "A.end < B.start", and an
// operation that failed or was cut short by a power cut never ends: it may
// or may not have happened.
//
// The rules (docs/design.md, "What a crash leaves behind"):
// - a write is durable once it returned OK with FUA, or once a Sync() that
//   was issued after it returned has returned OK;
// - a write W is superseded when a durable write to its sector was issued
//   after W returned; after a crash a sector may hold any write to it that
//   is not superseded (or its value at the last check, if no write since is
//   durable). Concurrent writes both stay allowed: their order is unknown.
// - a trim leaves the sector unspecified (the engine drops cached copies,
//   dirty ones too, and the origin may or may not discard): zero or any
//   value the sector ever held, until a write issued after the trim
//   returned supersedes it; a restart in between changes nothing (NBD's
//   rule: no assumption about trimmed data until it is written again).
// - what a check after a restart reads back is the sector's new durable
//   value (a trimmed sector's stays unspecified);
// - a read sees the same with "durable" replaced by "returned before the
//   read was issued" (no crash: nothing acknowledged may be lost).
//
// Every call is thread-safe; the state is behind one mutex, held for
// bookkeeping only, never across the engine's I/O.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cachecore::testing {

class ExpectedState {
 public:
  explicit ExpectedState(uint64_t sectors);

  uint64_t sectors() const { return sectors_; }
  // A tick now: a read takes one before it is issued and one after.
  uint64_t Now() { return clock_.fetch_add(1) + 1; }

  // Records an operation about to be issued over [first, first + count);
  // returns its handle for Acknowledge. Write `id` 0 writes zeroes.
  uint64_t BeginWrite(uint64_t first, uint64_t count, uint64_t id, bool fua);
  uint64_t BeginTrim(uint64_t first, uint64_t count);
  // The operation returned OK.
  void Acknowledge(uint64_t handle);
  // A Sync() is about to be issued; returns its start tick.
  uint64_t BeginSync() { return Now(); }
  // That Sync() returned OK: every write that returned before `start` is durable.
  void SyncCompleted(uint64_t start);
  // A clean shutdown: everything that returned is durable.
  void ShutdownCompleted() { SyncCompleted(Now()); }

  // What a read issued at `start` and returned at `end` may see in `sector`;
  // nullopt if `got` is allowed, else a description of what was.
  std::optional<std::string> CheckRead(uint64_t sector, uint64_t got, uint64_t start, uint64_t end);
  // The same after a crash or a restart (nothing runs).
  std::optional<std::string> CheckRecovered(uint64_t sector, uint64_t got);
  // After a restart: `got`, read back, is the sector's new durable value
  // (but a trimmed sector stays unspecified until a write replaces it).
  void Settle(uint64_t sector, uint64_t got);
  // Whether the sector is trimmed and not yet replaced by a durable write:
  // it may hold zeroes or anything it ever held, and change between them.
  bool Unspecified(uint64_t sector);
  // Once every sector is settled, forgets every operation.
  void ForgetOperations();

 private:
  static constexpr uint64_t kOpen = UINT64_MAX;  // never returned OK
  struct Op {
    uint64_t id;     // the value written (0 for zeroes and trims)
    uint64_t start;  // tick before issue
    uint64_t end;    // tick after an OK return, or kOpen
    bool fua;
    bool trim;
  };
  struct Sector {
    uint64_t settled_id = 0;    // read back at the last check (0: never written)
    uint64_t settled_tick = 0;  // when: a durable write at that tick
    bool unspecified = false;   // ... or trimmed then, and not written since
    std::vector<uint32_t> ops;  // indexes into ops_ since then
    std::vector<uint64_t> ever;  // every value it was ever sent, for trims
  };
  // What may be read now. `final_op(op)` says whether a write can no longer
  // be undone (durable, or returned before the read); ops issued after
  // `horizon` are not seen.
  struct Judgement {
    uint64_t floor = 0;    // issue tick of the latest final write
    bool trimmed = false;  // a trim stands: zeroes or any old value
    bool allowed = false;  // `got` may be read
  };
  template <typename Final>
  Judgement Judge(const Sector& s, uint64_t got, uint64_t horizon, Final final_op) const;
  bool Durable(const Op& op) const;
  std::string Describe(const Sector& s, uint64_t floor) const;
  uint64_t Begin(uint64_t first, uint64_t count, const Op& op);

  const uint64_t sectors_;
  std::atomic<uint64_t> clock_{1};
  std::mutex mu_;
  std::deque<Op> ops_;
  std::vector<Sector> state_;
  uint64_t durable_before_ = 0;  // writes that returned before this tick are durable
};

}  // namespace cachecore::testing
