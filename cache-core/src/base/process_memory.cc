#include "cachecore/base/process_memory.h"

#include <malloc.h>

namespace cachecore {

void ReturnFreedMemoryPromptly() {
#ifdef M_MMAP_THRESHOLD
  constexpr int kThreshold = 128 * 1024;
  // Setting either turns glibc's dynamic adjustment of both off.
  mallopt(M_MMAP_THRESHOLD, kThreshold);
  mallopt(M_TRIM_THRESHOLD, kThreshold);
#endif
}

}  // namespace cachecore
