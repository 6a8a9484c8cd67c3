#include "base/thread_name.h"

#include <sys/prctl.h>

namespace cachecore {

void NameThisThread(const char* name) {
  (void)prctl(PR_SET_NAME, name, 0, 0, 0);  // only a label: nothing depends on it
}

}  // namespace cachecore
