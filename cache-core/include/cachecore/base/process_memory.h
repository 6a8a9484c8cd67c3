// How the process's allocator hands memory back. A cache's daemon runs for
// months beside RocksDB, whose flushes and compactions allocate megabytes
// for a moment on their own threads. glibc's defaults then keep them: its
// first free of a large block raises the threshold under which blocks come
// from the arenas instead of the kernel (up to 32 MiB), and the threshold
// at which an arena's free top is trimmed with it (to 64 MiB), and
// malloc_trim never trims a thread's arena top. A cache of a million lines
// then carried about 4 MB (4 bytes a line) of freed memory for good.
#pragma once

namespace cachecore {

// Fixes glibc's thresholds at 128 KiB (their starting values): blocks
// above it are mapped and unmapped, arena tops above it trimmed on free.
// Call once at the start of main, before any thread exists. Returns
// nothing: a libc without mallopt keeps its defaults.
void ReturnFreedMemoryPromptly();

}  // namespace cachecore
