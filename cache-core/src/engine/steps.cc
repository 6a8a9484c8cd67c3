#include "cachecore/engine/steps.h"

namespace cachecore {

namespace {
StepObserver g_observer = nullptr;
}  // namespace

void SetStepObserver(StepObserver observer) { g_observer = observer; }

void ReachedStep(const char* step) {
  if (g_observer) g_observer(step);
}

}  // namespace cachecore
