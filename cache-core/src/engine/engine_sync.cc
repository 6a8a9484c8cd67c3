// Syncs: what makes acknowledged writes durable. SyncAll flushes both
// devices, then syncs the store; clients' syncs and FUA writes share them
// as a group commit (a synchronous caller waits on its own thread; an
// asynchronous one waits as an entry in the group, answered by whichever
// thread runs the sync that covers it). Evictions and the dirty-region map
// ride on them.
#include <algorithm>

#include "cachecore/engine/steps.h"
#include "engine/engine_async.h"

namespace cachecore {

Status Engine::Impl::SyncIfRecentlyEvicted(std::span<const uint64_t> lines) {
  if (!slots.AnyRecentlyEvicted(lines)) return Status::Ok();
  // The line's record may still say "clean" on disk while its slot is gone:
  // make the eviction durable before the origin copy changes.
  return SyncMetadata();
}

Status Engine::Impl::SyncMetadata() {
  const uint64_t listed = slots.EvictionsListed();
  ReachedStep("sync-metadata-1-begun");  // a test point
  const uint64_t sequence = dev.metadata->LatestSequence();  // durable once Sync() returns
  Status m = dev.metadata->Sync();
  if (!m.ok()) {
    LiveStats::Bump(stats.metadata_err);
    return m;
  }
  slots.ForgetEvictions(listed);
  WriteSyncMark(sequence);
  return m;
}

void Engine::Impl::WriteSyncMark(uint64_t sequence) {
  uint64_t written = sync_mark_written.load();
  do {
    if (sequence <= written) return;
  } while (!sync_mark_written.compare_exchange_weak(written, sequence));
  thread_local AlignedBuffer page(kSyncMarkSize);
  EncodeSyncMark(identity.uuid, sequence, page.data());
  // A mark that lands late, or behind a newer one, only checks less.
  if (!dev.cache->Write(kSyncMarkOffset, page.data(), kSyncMarkSize).ok()) {
    CountCacheError(stats.cache_write_err);
  }
}

Status Engine::Impl::SyncAll() {
  MutexLock flight(flush_flight_mu);
  const uint64_t epoch = slots.BeginFlush();
  // Data on both devices first, then the metadata that describes it. The
  // dirty-region map's changed pages ride on the cache flush: every region
  // with dirty data is marked on the device before any of its records is
  // synced.
  Status c = FlushCacheSide();
  const bool cache_flushed = c.ok();
  // With no dirty line the origin holds every acknowledged write and a clean
  // copy that did not persist fails its checksum and is read from the
  // origin: the client's flush does not depend on the cache device.
  if (!c.ok() && stats.dirty_lines.load() == 0) c = Status::Ok();
  Status o = dev.origin->Flush();
  if (!o.ok()) LiveStats::Bump(stats.origin_flush_err);
  ReachedStep("sync-2-devices-flushed");  // a test point
  // Both devices hold what this flush covers: the store may say so, in
  // the sync that makes the records durable (a start then knows them
  // stable). Not when the cache's flush failed and was forgiven the client
  // (no dirty line): a dirty record the cleaner is about to replace would
  // be taken as stable over data the cache lost.
  Status m = Status::Ok();
  if (c.ok() && o.ok()) {
    if (cache_flushed) m = dev.metadata->PutCompletedFlush(epoch);
    if (!m.ok()) LiveStats::Bump(stats.metadata_err);
    else m = SyncMetadata();
  }
  if (!c.ok()) return c;
  if (!o.ok()) return o;
  if (!m.ok()) return m;
  slots.CompleteFlush(epoch);
  return Status::Ok();
}

Status Engine::Impl::GroupSync() {
  SyncWaiter me;
  MutexLock lock(sync_group.mu);
  me.ticket = ++sync_group.asked;
  if (sync_group.running) {
    sync_group.waiting.push_back(&me);
    lock.Unlock();
    ReachedStep("sync-group-waiting");  // a test point: waits for the next sync
    lock.Lock();
    lock.Wait(sync_group.ended, [&] {
      sync_group.mu.AssertHeld();
      return me.done || !sync_group.running;
    });
    if (me.done) return me.status;
    std::erase(sync_group.waiting, &me);  // no sync covered it yet: this caller runs the next
  }
  const uint64_t covers = BeginSyncRound();
  lock.Unlock();
  return RunSyncRound(covers);
}

void Engine::Impl::GroupSyncAsync(EngineCompletion* done) {
  std::unique_ptr<SyncWaiter> w = Async().sync_waiters.Take();
  w->done = false;
  w->answer = done;
  bool lead;
  {
    MutexLock lock(sync_group.mu);
    w->ticket = ++sync_group.asked;
    sync_group.waiting.push_back(w.release());
    // A running sync hands on at its end; otherwise the sync thread leads one.
    lead = !sync_group.running && !sync_group.lead_queued;
    if (lead) sync_group.lead_queued = true;
  }
  if (lead) Async().syncs.Run({AsyncJob::kLeadSync});
}

void Engine::Impl::LeadQueuedSync() {
  MutexLock lock(sync_group.mu);
  sync_group.lead_queued = false;
  const bool asynchronous_waiting = std::any_of(sync_group.waiting.begin(), sync_group.waiting.end(),
                                                [](SyncWaiter* w) { return w->answer != nullptr; });
  if (sync_group.running || !asynchronous_waiting) return;  // a running sync hands on at its end
  const uint64_t covers = BeginSyncRound();
  lock.Unlock();
  (void)RunSyncRound(covers);  // each waiter gets the status
}

// The sync about to run covers every ticket handed out so far: each was
// asked after its writes completed, and before the sync begins.
uint64_t Engine::Impl::BeginSyncRound() {
  sync_group.running = true;
  return sync_group.asked;
}

bool Engine::Impl::EndSyncRound(uint64_t covers, const Status& s, std::vector<SyncWaiter*>& answered) {
  sync_group.running = false;
  bool synchronous_left = false, asynchronous_left = false;
  std::erase_if(sync_group.waiting, [&](SyncWaiter* w) {
    if (w->ticket > covers) {  // arrived once the sync had begun
      (w->answer != nullptr ? asynchronous_left : synchronous_left) = true;
      return false;
    }
    w->status = s;
    w->done = true;
    if (w->answer != nullptr) answered.push_back(w);
    return true;
  });
  sync_group.ended.notify_all();
  // A synchronous waiter left wakes and runs the next sync; without one,
  // the sync thread does, for the asynchronous ones.
  const bool hand_on = asynchronous_left && !synchronous_left && !sync_group.lead_queued;
  if (hand_on) sync_group.lead_queued = true;
  return hand_on;
}

Status Engine::Impl::RunSyncRound(uint64_t covers) {
  Status s = SyncAll();
  std::vector<SyncWaiter*> answered;
  bool hand_on;
  {
    MutexLock lock(sync_group.mu);
    hand_on = EndSyncRound(covers, s, answered);
  }
  AnswerSyncWaiters(answered, hand_on);
  return s;
}

void Engine::Impl::AnswerSyncWaiters(std::vector<SyncWaiter*>& answered, bool hand_on) {
  // The next round first: an answer may take its time.
  if (hand_on) async->syncs.Run({AsyncJob::kLeadSync});
  for (SyncWaiter* w : answered) {
    EngineCompletion* done = w->answer;
    Status status = std::move(w->status);
    async->sync_waiters.Give(std::unique_ptr<SyncWaiter>(w));
    Answer(done, std::move(status));
  }
}

Status Engine::Impl::FlushCacheSide() {
  CACHECORE_RETURN_IF_ERROR(PersistDirtyMap(MapWrite::kChanged, /*flush=*/false));  // counts its own errors
  Status c = dev.cache->Flush();
  if (!c.ok()) CountCacheError(stats.cache_flush_err);
  return c;
}

Status Engine::Impl::PersistDirtyMap(MapWrite what, bool flush) {
  MutexLock io(dirty_map_io);
  std::vector<std::pair<uint64_t, AlignedBuffer>> pages =
      slots.TakeChangedDirtyPages(what == MapWrite::kAll);
  std::vector<IoRequest> writes;
  for (auto& [offset, page] : pages) {
    writes.push_back({IoOp::kWrite, offset, kDirtyMapPageSize, page.data(), Status()});
  }
  Status s = Status::Ok();
  if (!writes.empty()) {
    s = dev.cache->SubmitAndWait(writes);
    if (!s.ok()) CountCacheError(stats.cache_write_err);
  }
  if (!writes.empty() && s.ok() && flush) {
    s = dev.cache->Flush();
    if (!s.ok()) CountCacheError(stats.cache_flush_err);
  }
  if (!s.ok()) {
    slots.MarkAllDirtyPagesChanged();  // written again next time
    return s;
  }
  return Status::Ok();
}


}  // namespace cachecore
