// CRC32C (Castagnoli) of a buffer: the per-4 KiB-block checksum kept in the
// metadata store and verified on every read hit. Uses SSE4.2 where the CPU
// has it, a table otherwise; both give the same value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cachecore {

uint32_t Crc32c(const void* data, size_t len, uint32_t seed = 0);

}  // namespace cachecore
