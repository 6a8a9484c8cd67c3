#!/usr/bin/env bash
# Lint: clang-tidy with the checks in .clang-tidy over every C++ file the
# build compiles (through its compile_commands.json), and clang-format
# (.clang-format) over the lines changed since git's HEAD, so that existing
# code is not reformatted wholesale. Exits non-zero on any finding.
# Usage: scripts/lint.sh [FILE...]   (default: every file the build compiles)
# CACHECTL_LINT_BUILD names the build directory (default build/, which
# scripts/setup.sh makes). Installs clang-tidy and clang-format if missing
# (as root, with apt-get).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${CACHECTL_LINT_BUILD:-build}

missing=()
for p in clang-tidy clang-format; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "lint: missing packages: ${missing[*]}; run as root to install them" >&2
    exit 1
  fi
  echo "lint: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -f "$build/compile_commands.json" ]; then
  # CMAKE_EXPORT_COMPILE_COMMANDS is on in CMakeLists.txt: configuring is enough.
  cmake -S . -B "$build" >/dev/null
fi

status=0
root=$(pwd)
# clang-tidy: the project's own sources only (not the build tree's).
if [ $# -gt 0 ]; then
  files=()
  for f in "$@"; do files+=("$(realpath "$f")"); done
else
  files=("^$root/(cache-core|dm-target-shim|cachectl|tests|scripts)/")
fi
echo "== clang-tidy (${build}/compile_commands.json)"
if ! run-clang-tidy -quiet -p "$build" -j"$(nproc)" \
     -header-filter="^$root/(cache-core|dm-target-shim|cachectl|tests|scripts)/" "${files[@]}" \
     >"$build/clang-tidy.log" 2>&1; then
  sed 's/\x1b\[[0-9;]*m//g' "$build/clang-tidy.log" | grep -E '(warning|error): ' | sort -u ||
    tail -20 "$build/clang-tidy.log"
  echo "lint: clang-tidy findings (whole output: $build/clang-tidy.log)"
  status=1
fi

# clang-format: the changed lines of tracked files, and new files whole.
echo "== clang-format (lines changed since HEAD)"
changed=$(git --no-optional-locks diff --name-only --diff-filter=AM HEAD -- '*.cc' '*.h' 2>/dev/null || true)
new=$(git --no-optional-locks ls-files --others --exclude-standard -- '*.cc' '*.h')
if [ $# -gt 0 ]; then
  want=" $* "
  keep() {
    for f in $1; do
      if [[ $want == *" $f "* ]]; then echo "$f"; fi
    done
  }
  changed=$(keep "$changed")
  new=$(keep "$new")
fi
for f in $changed; do
  [ -f "$f" ] || continue
  lines=()
  # Each hunk's new side: "@@ -a,b +start,count @@".
  while read -r start count; do
    [ "${count:-1}" -eq 0 ] && continue
    lines+=("--lines=$start:$((start + ${count:-1} - 1))")
  done < <(git --no-optional-locks diff -U0 HEAD -- "$f" | sed -n 's/^@@ -[0-9,]* +\([0-9]*\),\{0,1\}\([0-9]*\) @@.*/\1 \2/p')
  [ ${#lines[@]} -gt 0 ] || continue
  clang-format --dry-run --Werror "${lines[@]}" "$f" || status=1
done
for f in $new; do
  clang-format --dry-run --Werror "$f" || status=1
done
[ $status -eq 0 ] && echo "lint: clean"
exit $status
