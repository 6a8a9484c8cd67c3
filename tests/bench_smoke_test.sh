#!/usr/bin/env bash
# The benchmark harness works end to end (scripts/bench/bench.py --smoke):
# every section runs against real servers (the emulated disk, nbdkit, a
# cachectl daemon), the results file holds every configuration's points
# with I/O done, the plots are PNG files and the report has every table.
# Nothing here depends on how fast anything was: that is the benchmarks'.
# Usage: bench_smoke_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
w=$(mktemp -d /tmp/cachectl-bench-smoke.XXXXXX)
trap 'rm -rf "$w"' EXIT
/usr/bin/python3 "$here/scripts/bench/bench.py" --build "$build" --out "$w/results.json" \
  --plots "$w/plots" --smoke >"$w/report.md"
/usr/bin/python3 - "$w" <<'PY'
import json, sys
w = sys.argv[1]
r = json.load(open(f"{w}/results.json"))
def fail(why):
    sys.exit(f"bench smoke: {why}")
configs = {(p["workload"], p["config"]) for p in r["points"] if p["iops"] > 0}
for workload in ("4k-randread-qd32", "4k-randwrite", "64k-seqwrite", "sql-8k-70r30w", "iometer-1m-seqread-8t"):
    for config in ("uncached", "cachectl", "nbdkit-cache"):
        if (workload, config) not in configs:
            fail(f"no I/O done for {workload} on {config}")
for config in ("cachectl", "nbdkit-file", "nbdkit-memory", "ssd-direct"):
    if ("hit-4k-randread-qd32", config) not in configs:
        fail(f"no hit-path point for {config}")
loads = [p for p in r["points"] if p.get("curve") == "load"]
if len(loads) != 2 * 3 * 4:
    fail(f"{len(loads)} latency-against-load points, expected 24")
if r["flush"]["lines"] != 100 or r["flush"]["flush_seconds"] <= 0:
    fail(f"flush section: {r['flush']}")
pressure = r["pressure"]
for config, phases in (("cachectl", 3), ("nbdkit-cache", 3), ("uncached", 2)):
    done = [p for p in pressure["configs"][config] if p["iops"] > 0]
    if len(done) != phases:
        fail(f"pressure section: {len(done)} phases with I/O on {config}, expected {phases}")
if not pressure["timeline"] or pressure["drain"]["seconds"] <= 0:
    fail(f"pressure section: no timeline or drain: {pressure['drain']}")
if pressure["disk_seq_mb_s"] <= 0 or pressure["disk_randwrite_mb_s"] <= 0:
    fail(f"pressure section: the bare disk's writes were not measured: {pressure['disk_seq_mb_s']}, "
         f"{pressure['disk_randwrite_mb_s']}")
if any("bypassed_no_space" not in row for row in pressure["timeline"]) or "to_target_after_burst_s" not in pressure:
    fail("pressure section: the timeline lacks the requests around the cache, or the time to the target")
meta = r["metadata"][0]
# Every line dirty but for a few: the ghost's false matches (12-bit
# fingerprints: about 0.2 % of the churn's misses) send some of the churn's
# older lines to main, where the scan does not reach them, and their
# writes then find only dirty victims and go around the cache.
if (meta["lines"] != 20000 or meta["dirty_lines"] < 19900 or meta["churn_evictions"] < 20000
        or meta["rss_bytes_per_line"] <= 0 or not meta["open_seconds"] > 0 or not meta["open_seconds_after_crash"] > 0
        or not 0 < meta["store_open_seconds"] <= meta["open_seconds"]
        or meta["rocksdb_memtable_cap_bytes"] <= 0 or "writeback_4k_iops" not in meta
        or meta["clean_start_from_snapshot"] is not True or not meta["snapshot_bytes_per_line"] > 0):
    fail(f"metadata section: {meta}")
if not r["policy"] or not 0 < r["policy"][0]["cachectl"] < 1:
    fail(f"policy section: {r['policy']}")
tls = r["tls"]
if tls["bytes"] != 16 << 20 or not all(tls[k] > 0 for k in ("cachectl_tls_mb_s", "cachectl_unix_mb_s",
                                                             "nbdkit_tls_mb_s", "nbdkit_tcp_mb_s")):
    fail(f"tls section: {tls}")
vol = r["volumes"]
for layout in ("shared", "split"):
    if len(vol[layout]["volumes"]) != 2 or not all(v["iops"] > 0 for v in vol[layout]["volumes"]):
        fail(f"volumes section: no I/O on a volume {layout}: {vol[layout]}")
enc = r["encryption"]
if set(enc["profiles"]) != {"4k-randread", "4k-randwrite", "64k-seqread", "64k-seqwrite", "sql-8k-70r30w"} or not all(
        row[c]["iops"] > 0 for row in enc["profiles"].values() for c in ("plain", "encrypted")):
    fail(f"encryption section: {enc}")
ram = r["ram"]
ram_points = {(p["workload"], p["config"]) for p in r["points"] if p["workload"].startswith("ram-") and p["iops"] > 0}
if ram["ram_hits"] <= 0 or len(ram_points) != 9:
    fail(f"ram section: {ram}, points {sorted(ram_points)}")
for plot in ("latency-4k-randread.png", "latency-sql-8k-70r30w.png", "pressure.png"):
    if open(f"{w}/plots/{plot}", "rb").read(8) != b"\x89PNG\r\n\x1a\n":
        fail(f"{plot} is not a PNG")
report = open(f"{w}/report.md").read()
for heading in ("### Seed profiles", "### IOMeter", "### Latency against load", "### Flush",
                "### Write-back under pressure",
                "### The hit path", "### Metadata", "### Scale", "### Policy", "### NBD over TLS",
                "### One SSD for two volumes", "### Encryption at rest", "### The RAM tier"):
    if heading not in report:
        fail(f"the report has no '{heading}'")
print("bench smoke: every section ran; results, plots and report complete")
PY
