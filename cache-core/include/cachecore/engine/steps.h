// The numbered steps of the management operations, as the engine passes
// them. docs/reliability.md lists them with what a crash at each leaves
// behind. A front end may install an observer; the crash tests use one to
// kill the process at an exact step (cachectl's CACHECTL_CRASH_AT).
//
//   attach-1-store-formatted     metadata written, no superblock yet
//   attach-2-superblock-written  superblock written, nothing served yet
//   flush-1-origin-written       a batch of dirty lines written to the origin
//   flush-2-origin-synced        ... and made durable there, still marked dirty
//   flush-3-marked-clean         ... and durably marked clean
//   flush-4-batch-done           a client's flush (not the background
//                                cleaner) has cleaned a batch, with more to come
//   mode-1-cleaned               leaving write-back: every line clean, mode not saved
//   mode-2-saved                 the new mode saved
//   detach-1-flushed             every line clean
//   detach-2-shut-down           clean shutdown recorded in the superblock
//   detach-3-superblock-erased   the cache device released
//   add-1-table-saved            a volume added to the store's table, not yet served
//   add-2-line-space-saved       ... the superblock and dirty-region map cover it
//   remove-1-marked              a volume marked removing: refuses requests
//   remove-2-dropped             ... its dirty lines cleaned, its lines dropped (synced)
//   remove-3-forgotten           ... gone from the store's table
#pragma once

namespace cachecore {

using StepObserver = void (*)(const char* step);

// Installs `observer` for the whole process (nullptr removes it). Not
// thread-safe against ReachedStep: install before the engine starts.
void SetStepObserver(StepObserver observer);

// Called by the engine at each step above.
void ReachedStep(const char* step);

}  // namespace cachecore
