// Figures for docs/reliability.md: a test that counts what it survived
// appends "name value" lines to the file named by $CACHECTL_FIGURES, which
// scripts/reliability sums up. Without the variable nothing is written.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace cachecore::testing {

inline void RecordFigure(const char* name, uint64_t value) {
  const char* path = std::getenv("CACHECTL_FIGURES");
  if (!path || !*path) return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s %llu\n", name, static_cast<unsigned long long>(value));
    std::fclose(f);
  }
}

}  // namespace cachecore::testing
