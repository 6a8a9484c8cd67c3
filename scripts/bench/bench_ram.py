"""The RAM tier section of bench.py: warm hits served from memory, against
nbdkit's cache filter (whose cache file is read through the page cache, so
its warm hits come from memory too), with the same cache without its RAM
tier beside them. The main bench's cache (4 KiB lines, over the emulated
disk) gets `set --ram-cache` a quarter larger than the working set, the
working set is read twice (the first read fills the cache, the second is a
hit that fills the tier), and the hit points run; then the tier is set off
again. Reported per point: IOPS of each, the RAM tier's over the peer's and
over the cache alone, and the daemon's CPU per I/O."""
from bench_lib import MiB, warm

POINTS = (("ram-4k-randread-qd32", "randread", "4k", 32), ("ram-64k-read-qd16", "read", "64k", 16),
          ("ram-64k-randread-qd16", "randread", "64k", 16))


def ram(bench, log, log_point):
    ram_bytes = bench.working_set * 5 // 4
    log(f"== the RAM tier: warm hits on a {bench.working_set // MiB} MiB working set, "
        f"{ram_bytes // MiB} MiB of RAM tier")
    cachectl = bench.targets["cachectl"]
    warm(cachectl, bench.size)
    warm(bench.targets["nbdkit-cache"], bench.size)
    for name, rw, bs, depth in POINTS:  # the cache alone first
        bench.point(name, "cachectl", cachectl, rw, bs, depth)
    bench.cachectl("set", "bench", "--ram-cache", f"{ram_bytes // MiB}M")
    try:
        warm(cachectl, bench.size)  # hits: they fill the tier
        filled = bench.stats()["ram_used_bytes"]
        for name, rw, bs, depth in POINTS:
            bench.point(name, "cachectl-ram", cachectl, rw, bs, depth)
            bench.point(name, "nbdkit-cache", bench.targets["nbdkit-cache"], rw, bs, depth)
        stats = bench.stats()
    finally:
        bench.cachectl("set", "bench", "--ram-cache", "off")
    bench.results["ram"] = {"ram_cache_bytes": ram_bytes, "working_set_bytes": bench.working_set,
                            "filled_bytes": filled, "ram_hits": stats["ram_hits"],
                            "ram_hit_ratio": stats["ram_hit_ratio"]}
    log(f"  the tier held {filled // MiB} MiB after the warm-up; {stats['ram_hits']} blocks read from it")


def report_lines(results):
    r = results.get("ram")
    if not r:
        return []
    points = {}
    for p in results["points"]:
        if p["workload"].startswith("ram-"):
            points.setdefault(p["workload"], {})[p["config"]] = p
    lines = ["### The RAM tier", "",
             f"Warm hits on a {r['working_set_bytes'] // MiB} MiB working set with `set --ram-cache "
             f"{r['ram_cache_bytes'] // MiB}M` ({r['filled_bytes'] // MiB} MiB held after the warm-up), against "
             "nbdkit's cache filter (its warm hits come from the page cache) and the same cache without its RAM "
             "tier; daemon CPU in microseconds per I/O.", "",
             "| point | cache alone IOPS | RAM tier IOPS | nbdkit-cache IOPS | RAM tier / peer | RAM tier / alone | "
             "RAM tier CPU us/IO | peer CPU us/IO |", "|---|---|---|---|---|---|---|---|"]
    for name, by in points.items():
        alone, tier, peer = (by.get(c, {}) for c in ("cachectl", "cachectl-ram", "nbdkit-cache"))
        ratio = lambda a, b: f"{a['iops'] / b['iops']:.2f}x" if a and b and b["iops"] else "-"
        lines.append(f"| {name} | {alone.get('iops', 0):.0f} | {tier.get('iops', 0):.0f} | {peer.get('iops', 0):.0f} | "
                     f"{ratio(tier, peer)} | {ratio(tier, alone)} | {tier.get('daemon_cpu_us_per_io')} | "
                     f"{peer.get('daemon_cpu_us_per_io')} |")
    return lines + [""]
