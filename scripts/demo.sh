#!/usr/bin/env bash
# The main job on sparse files: attach a cache to a volume, run I/O, show
# the statistics, flush, detach, and check that the origin alone holds the
# data. Pass real devices to use them instead (their contents are
# overwritten): scripts/demo.sh [ORIGIN CACHE]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
origin=${1:-$work/origin.img}
cache=${2:-$work/cache.img}
if [ $# -eq 0 ]; then
  truncate -s 1G "$origin"
  truncate -s 256M "$cache"
fi
build/tests/engine_demo --origin "$origin" --cache "$cache" --metadata "$work/metadata"
