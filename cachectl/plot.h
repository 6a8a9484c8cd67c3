// PNG charts drawn by gnuplot (Debian's gnuplot-nox), for advise and probe.
#pragma once

#include <string>

namespace cachectl {

// Whether `path` can be created or written (it is created, empty); `why`
// says what failed. Commands check this before any long work.
bool CanWritePlot(const std::string& path, std::string* why);

// Runs gnuplot with a pngcairo terminal writing `path`, then `body` (the
// plot commands and their inline data). Returns an exit code; on failure
// prints one line starting with `verb`.
int DrawPng(const std::string& verb, const std::string& path, const std::string& body);

}  // namespace cachectl
