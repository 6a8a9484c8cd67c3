"""The pressure section of bench.py: write-back under a write burst, then
reads of data not in the cache while that data is still dirty, then a mix,
then the drain to the target; side by side with nbdkit's cache filter and
the bare emulated disk. What a user of write-back lives through: does the
cache make misses slower than no cache while it is full of dirty data?

Phases, each `seconds` long unless said (every configuration runs the same
fio jobs on the same regions):
  burst   4 KiB random writes at depth 32 over as many bytes as the cache
          holds (from the origin's start), for twice the phase's length: the cache fills with dirty
          data as far as throttling lets it (cachectl and the peer only)
  reads   4 KiB random reads at depth 16 of a region never written nor read
          before (misses: on cachectl, served from the origin while the
          dirty data waits)
  mixed   8 KiB random 70/30 reads and writes at depth 16 over the burst's
          region and the read region
  drain   cachectl only: no client I/O; the time until dirty lines are back
          at the target, and the bytes a second cleaning reached meanwhile
cachectl's `stats` are sampled twice a second throughout for the plot,
the time from the burst's end to the target, and the misses each phase
served around the cache for want of a clean line. The bare disk's 4 KiB
random writes and 1 MiB sequential writes, measured first on the read
region (never cached before its phase), set the cleaning's bounds."""
import json
import os
import subprocess
import threading
import time

from bench_lib import MiB, fio

SAMPLE_SECONDS = 0.5


class StatsSampler:
    """`read` (the daemon's stats, parsed) twice a second in a thread:
    (seconds since start, phase, dirty %, writeback MB/s, throttled writes,
    requests around a cache with no clean line)."""

    def __init__(self, read):
        self.read = read
        self.phase = "start"
        self.rows = []
        self.stopped = threading.Event()

    def record(self, s):
        """One row of the timeline from stats `s` (the thread's, or a
        reading of the caller's that must be in it)."""
        self.rows.append({"t": round(time.monotonic() - self.started, 2), "phase": self.phase,
                          "dirty_pct": round(100 * s["dirty_lines"] / s["capacity_lines"], 2),
                          "writeback_mb_s": round(s["writeback_rate"] / 1e6, 2),
                          "throttled_writes": s["throttled_writes"], "state": s["cleaner_state"],
                          "bypassed_no_space": s["bypassed_no_space"]})

    def run(self):
        while not self.stopped.wait(SAMPLE_SECONDS):
            try:
                self.record(self.read())
            except (subprocess.CalledProcessError, json.JSONDecodeError):
                continue

    def __enter__(self):
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stopped.set()
        self.thread.join()


def regions(bench, capacity):
    """(burst, reads) byte regions of the origin: the burst over as many
    bytes as the cache holds, from 0; the reads over the working set's size
    past it, on a MiB boundary (within the origin: 4 working sets)."""
    reads_at = -(-capacity // MiB) * MiB
    return (0, capacity), (reads_at, bench.working_set)


def phase_jobs(bench, capacity):
    """The fio jobs of each phase: (phase, rw, bs, depth, extra, seconds)."""
    (_, burst_size), (reads_at, reads_size) = regions(bench, capacity)
    burst = (f"--size={burst_size}",)
    unread = (f"--offset={reads_at}", f"--size={reads_size}")
    mixed = (f"--size={reads_at + reads_size}", "--rwmixread=70")
    s = bench.seconds
    return [("burst", "randwrite", "4k", 32, burst, 2 * s), ("reads", "randread", "4k", 16, unread, s),
            ("mixed", "randrw", "8k", 16, mixed, s)]


def run_phases(bench, config, target, capacity, sampler=None):
    rows = []
    for phase, rw, bs, depth, extra, seconds in phase_jobs(bench, capacity):
        if config == "uncached" and phase == "burst":
            continue  # nothing to fill
        if sampler:
            sampler.phase = phase
        r = bench.fio(config, target, rw, bs, depth, seconds, ("--randrepeat=0",) + extra)
        r.update({"workload": f"pressure-{phase}", "config": config})
        rows.append(r)
        bench.results["points"].append(r)
    return rows


def drain(bench, sampler, limit_seconds):
    """Waits, with no client I/O, until cachectl's dirty lines are back at
    its target: (seconds, MB cleaned, dirty % at the start, at the end)."""
    sampler.phase = "drain"
    first = sampler.read()
    target = first["dirty_target_pct"]
    start_dirty = first["dirty_lines"]
    started = time.monotonic()
    now = first
    while time.monotonic() - started < limit_seconds:
        now = sampler.read()
        if 100 * now["dirty_lines"] / now["capacity_lines"] <= target + 1:
            break
        time.sleep(SAMPLE_SECONDS)
    seconds = time.monotonic() - started
    sampler.record(now)  # the timeline ends where the drain did
    cleaned_mb = (start_dirty - now["dirty_lines"]) * now["line_size"] / 1e6
    return {"seconds": round(seconds, 1), "reached_target": 100 * now["dirty_lines"] / now["capacity_lines"] <= target + 1,
            "cleaned_mb": round(cleaned_mb, 1), "mb_s": round(cleaned_mb / seconds, 2) if seconds else None,
            "dirty_pct_start": round(100 * start_dirty / now["capacity_lines"], 1),
            "dirty_pct_end": round(100 * now["dirty_lines"] / now["capacity_lines"], 1), "target_pct": target}


def bare_disk(bench, reads_at, reads_size, log_point):
    """The bare disk's 4 KiB random writes at depth 16 and 1 MiB sequential
    writes at depth 4, on the read region: the bounds of cleaning's speed
    (its writes are sorted and coalesced, but scattered over the disk)."""
    points = {}
    for name, rw, bs, depth in (("randwrite", "randwrite", "4k", 16), ("seqwrite", "write", "1m", 4)):
        r = fio(bench.targets["uncached"], rw, bs, depth, bench.seconds, bench.size,
                ("--randrepeat=0", f"--offset={reads_at}", f"--size={reads_size}"), bench.servers("uncached"))
        r.update({"workload": f"pressure-disk-{name}", "config": "uncached"})
        bench.results["points"].append(r)
        log_point(r)
        points[name] = r
    return points


def to_target(rows, target):
    """Seconds from the burst's last sample until dirty lines were first
    back within a point of the target (None: not while sampled, which
    ends where the drain ended)."""
    burst = [r for r in rows if r["phase"] == "burst"]
    if not burst:
        return None
    end = burst[-1]["t"]
    reached = next((r["t"] for r in rows if r["t"] > end and r["dirty_pct"] <= target + 1), None)
    return None if reached is None else round(reached - end, 1)


def pressure(bench, log, log_point):
    log("== pressure: a write burst, reads of data not in the cache, a mix, the drain")
    bench.cachectl("flush", "bench")  # what earlier sections left dirty
    bench.mode(True)
    with StatsSampler(bench.stats) as sampler:
        now = sampler.read()
        capacity = now["capacity_lines"] * now["line_size"]
        (_, _), (reads_at, reads_size) = regions(bench, capacity)
        sampler.phase = "disk alone"
        disk = bare_disk(bench, reads_at, reads_size, log_point)
        out = {"configs": {}, "disk_randwrite_mb_s": disk["randwrite"]["mb_s"],
               "disk_seq_mb_s": disk["seqwrite"]["mb_s"], "cache_bytes": capacity}
        out["configs"]["cachectl"] = run_phases(bench, "cachectl", bench.targets["cachectl"], capacity, sampler)
        out["drain"] = drain(bench, sampler, 30 if bench.smoke else 120 if bench.quick else 600)
    out["timeline"] = sampler.rows
    out["to_target_after_burst_s"] = to_target(sampler.rows, out["drain"]["target_pct"])
    for config in ("uncached", "nbdkit-cache"):
        out["configs"][config] = run_phases(bench, config, bench.targets[config], capacity)
    bench.results["pressure"] = out
    for rows in out["configs"].values():
        for r in rows:
            log_point(r)
    log(f"  drain: {out['drain']}")
    bench.cachectl("flush", "bench")
    bench.mode(False)


# ---- the report

def phase_row(rows, phase):
    return next((r for r in rows if r["workload"] == f"pressure-{phase}"), None)


def timeline_plot(out, plots):
    """dirty % and cleaning MB/s over cachectl's phases, the clients' MB/s
    of each phase as a step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = out["timeline"]
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=100)
    t = [r["t"] for r in rows]
    ax.plot(t, [r["dirty_pct"] for r in rows], color="tab:red", label="dirty lines, % of the cache")
    ax.axhline(out["drain"]["target_pct"], color="tab:red", linestyle=":", label="target")
    ax.set_xlabel("seconds")
    ax.set_ylabel("dirty %")
    ax.set_ylim(0, 100)
    right = ax.twinx()
    right.plot(t, [r["writeback_mb_s"] for r in rows], color="tab:blue", label="cleaning, MB/s")
    clients = {r["workload"].split("-", 1)[1]: r["mb_s"] for r in out["configs"]["cachectl"]}
    right.step(t, [clients.get(r["phase"], 0) for r in rows], where="post", color="tab:green",
               label="clients, MB/s (phase mean)")
    right.set_ylabel("MB/s")
    first = {}
    for r in rows:
        first.setdefault(r["phase"], r["t"])
    for phase, at in first.items():
        ax.axvline(at, color="grey", alpha=0.3)
        ax.text(at, 97, f" {phase}", fontsize=8, va="top")
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], loc="center right", fontsize=8)
    ax.set_title("cachectl write-back under pressure (emulated 7,200 rpm disk)")
    fig.tight_layout()
    fig.savefig(os.path.join(plots, "pressure.png"))
    plt.close(fig)
    return ["![dirty data and throughput over the pressure phases](bench/pressure.png)", ""]


def p99s(point):
    return ", ".join(f"{d[0]} {point[f'{d}_p99_ms']:.1f}" for d in ("read", "write") if f"{d}_p99_ms" in point)


def around_lines(out):
    """The requests each cachectl phase served around the cache for want of
    a clean line (stats' bypassed_no_space, between the phase's first and
    last samples)."""
    if not out["timeline"] or not all("bypassed_no_space" in r for r in out["timeline"]):
        return []  # a run from before it was sampled
    by_phase = {}  # phase: (the count before it, at its last sample)
    before = out["timeline"][0]["bypassed_no_space"]
    for r in out["timeline"]:
        first, _ = by_phase.get(r["phase"], (before, 0))
        by_phase[r["phase"]] = (first, r["bypassed_no_space"])
        before = r["bypassed_no_space"]
    parts = [f"{phase} {last - first}" for phase, (first, last) in by_phase.items()
             if phase in ("burst", "reads", "mixed")]
    if not parts:
        return []
    return ["", "Lines of requests served around the cache for want of a clean line, by phase: " +
            ", ".join(parts) + "."]


def report_lines(results, plots):
    out = results.get("pressure")
    if not out:
        return []
    configs = ("cachectl", "nbdkit-cache", "uncached")
    lines = ["### Write-back under pressure", "",
             "A write burst (4 KiB random writes at depth 32 over as many bytes as the cache holds), then 4 KiB "
             "random reads at depth 16 of data never cached, then an 8 KiB 70/30 mix at depth 16; "
             "IOPS, then the 99th-percentile latency of reads (r) and writes (w) in ms.", "",
             "| phase | " + " | ".join(configs) + " | cachectl / disk | cachectl / peer |", "|---|---|---|---|---|---|"]
    for phase in ("burst", "reads", "mixed"):
        got = {c: phase_row(out["configs"].get(c, []), phase) for c in configs}
        cells = " | ".join(f"{g['iops']:.0f}, {p99s(g)}" if g else "-" for g in got.values())
        ratio = lambda other: f"{got['cachectl']['iops'] / got[other]['iops']:.2f}" if got["cachectl"] and got[other] else "-"
        lines.append(f"| {phase} | {cells} | {ratio('uncached')} | {ratio('nbdkit-cache')} |")
    d = out["drain"]
    lines += around_lines(out)
    burst_end = [r for r in out["timeline"] if r["phase"] == "burst"]
    peak = max((r["dirty_pct"] for r in out["timeline"]), default=0)
    throttled = burst_end[-1]["throttled_writes"] if burst_end else 0
    if "to_target_after_burst_s" not in out:
        reached = ""  # a run from before it was measured
    elif out["to_target_after_burst_s"] is None:
        reached = ", not back at the target by the end of the drain"
    else:
        reached = f", back at the target {out['to_target_after_burst_s']:.0f} s after the burst ended"
    lines += ["", f"Dirty lines peaked at {peak:.0f} % of the cache ({throttled} writes throttled by the end of "
                  f"the burst){reached}. With no client I/O, cleaning took {d['seconds']:.0f} s from {d['dirty_pct_start']:.0f} % "
                  f"to {d['dirty_pct_end']:.0f} % (target {d['target_pct']} %"
                  f"{'' if d['reached_target'] else ', not reached in the time allowed'}): {d['mb_s']} MB/s, "
                  f"{d['mb_s'] / out['disk_seq_mb_s']:.2f}x the disk's {out['disk_seq_mb_s']:.0f} MB/s sequential "
                  f"writes (1 MiB at depth 4) and {d['mb_s'] / out['disk_randwrite_mb_s']:.1f}x its 4 KiB random writes "
                  f"({out['disk_randwrite_mb_s']:.2f} MB/s at depth 16).", ""]
    return lines + timeline_plot(out, plots)
