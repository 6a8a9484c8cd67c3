"""The markdown report and the PNG plots of a benchmark run (bench.py)."""
import os
import re

import bench_pressure
import bench_tls
import bench_volumes
import bench_encryption
import bench_ram

QNAP = {"4k-randread": "27.8x", "4k-randwrite": "93x", "64k-seqread": "2.2x", "64k-seqwrite": "3.4x"}
CONFIGS = ("uncached", "cachectl", "nbdkit-cache")
BLOCK_STATE_BYTES = 6  # RAM per 4 KiB block of a line: CRC (4), flush epoch (1), flags (1)


def reference_ratios(traces):
    """The reference table of the traces' README.md: {(trace, pct): {policy: ratio}}."""
    table, trace, header = {}, None, None
    for line in open(os.path.join(traces, "README.md")):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 2 and cells[0] == "trace":  # trace, size, then a column per policy
            header = cells[2:]
        elif header and len(cells) == len(header) + 2 and cells[1].endswith("%"):
            trace = cells[0] or trace
            table[(trace, int(cells[1].rstrip(" %")))] = dict(zip(header, (float(c) for c in cells[2:])))
    return table


class Points:
    def __init__(self, results):
        self.points = results["points"]

    def get(self, workload, config, **tags):
        for p in self.points:
            if p["workload"] == workload and p["config"] == config and \
                    all(p.get(k) == v for k, v in tags.items()):
                return p
        return None

    def curve(self, workload, config):
        return sorted((p for p in self.points if p["workload"] == workload and p["config"] == config
                       and p.get("curve") == "load"), key=lambda p: p["load_pct"])


def x(a, b):
    return f"{a / b:.1f}x" if b else "-"


def us(v):
    return "-" if v is None else f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def cpu_total(p):
    """Microseconds of CPU per I/O, the server's and fio's together ("-" for a
    run measured before CPU was)."""
    return us(p.get("cpu_us_per_io")) if p else "-"


def cpu(p, unit=""):
    """The total, then the daemon's and fio's parts: "25.5 (16.3 + 9.2)"."""
    if not p or p.get("cpu_us_per_io") is None:
        return "-"
    if p.get("daemon_cpu_us_per_io") is None:
        return f"{us(p['cpu_us_per_io'])}{unit} (fio alone)"
    return f"{us(p['cpu_us_per_io'])}{unit} ({us(p['daemon_cpu_us_per_io'])} + {us(p['client_cpu_us_per_io'])})"


def threads(p):
    return str(p["daemon_threads"]) if p and p.get("daemon_threads") else "-"


CPU_HEAD = "CPU us per I/O: total (daemon + fio)"


def randread_table(pts):
    base = pts.get("4k-randread-qd32", "uncached")
    if not base:
        return []
    lines = ["### 4 KiB random read, queue depth 32, on the emulated disk (warm cache)", "",
             f"| configuration | IOPS | MB/s | mean ms | p99 ms | speedup over uncached | {CPU_HEAD} | "
             "daemon threads |", "|---|---|---|---|---|---|---|---|"]
    for config in CONFIGS:
        p = pts.get("4k-randread-qd32", config)
        if p:
            lines.append(f"| {config} | {p['iops']:.0f} | {p['mb_s']:.1f} | {p['lat_mean_ms']:.2f} | "
                         f"{p['lat_p99_ms']:.2f} | {x(p['iops'], base['iops'])} | {cpu(p)} | {threads(p)} |")
    return lines + ["", "QNAP's published SSD-cache speedup for 4K random read: 27.8x.", ""]


def profile_table(pts):
    names = ("4k-randread", "4k-randwrite", "64k-seqread", "64k-seqwrite", "sql-8k-70r30w",
             "oracle-8k-90r10w", "sql-8k-80r20w")
    rows = []
    for name in names:
        u, c, n = (pts.get(name, cfg, threads=None, curve=None) for cfg in CONFIGS)
        if u and c and n:
            rows.append(f"| {name} | {u['iops']:.0f} | {c['iops']:.0f} | {n['iops']:.0f} | "
                        f"{x(c['iops'], u['iops'])} | {x(n['iops'], u['iops'])} | {x(c['iops'], n['iops'])} | "
                        f"{cpu_total(c)} / {cpu_total(n)} | "
                        f"{c['lat_mean_ms']:.2f} / {c['lat_p99_ms']:.2f} | {n['lat_mean_ms']:.2f} / "
                        f"{n['lat_p99_ms']:.2f} | {QNAP.get(name, '')} |")
    if not rows:
        return []
    lines = ["### Seed profiles on the emulated disk (queue depth 16, working set warm)", "",
             "Write profiles run cachectl in write-back (nbdkit's cache filter is write-back too).", "",
             "| profile | uncached IOPS | cachectl IOPS | nbdkit-cache IOPS | cachectl speedup | peer speedup | "
             "cachectl / peer | CPU us per I/O, cachectl / peer | cachectl mean / p99 ms | peer mean / p99 ms | "
             "QNAP SSD-cache speedup |", "|---|---|---|---|---|---|---|---|---|---|---|"] + rows
    details = []
    for name in names:
        for cfg in CONFIGS:
            p = pts.get(name, cfg, threads=None, curve=None)
            if p:
                details.append(f"| {name} | {cfg} | {p['iops']:.0f} | {p['mb_s']:.1f} | {p['lat_mean_ms']:.2f} | "
                               f"{p['lat_p99_ms']:.2f} | {cpu(p)} | {threads(p)} |")
    lines += ["", "Each configuration in full:", "",
              f"| profile | configuration | IOPS | MB/s | mean ms | p99 ms | {CPU_HEAD} | daemon threads |",
              "|---|---|---|---|---|---|---|---|"] + details
    wt, wb = pts.get("4k-randwrite", "cachectl-wt"), pts.get("4k-randwrite", "cachectl", curve=None)
    if wt and wb:
        lines += ["", f"4 KiB random writes, cachectl write-back against write-through on the same disk: "
                      f"{wb['iops']:.0f} against {wt['iops']:.0f} IOPS ({x(wb['iops'], wt['iops'])}), "
                      f"CPU per I/O {cpu(wb, ' us')} against {cpu(wt, ' us')}; write-through waits for the disk."]
    return lines + [""]


def iometer_table(pts):
    rows = []
    for workload in sorted({p["workload"] for p in pts.points if p["workload"].startswith("iometer-")},
                           key=lambda w: (w.split("-")[2], int(w.rsplit("-", 1)[1].rstrip("t")))):
        u, c, n = (pts.get(workload, cfg) for cfg in CONFIGS)
        if u and c and n:
            rows.append(f"| {workload[8:]} | {u['mb_s']:.1f} | {c['mb_s']:.1f} | {n['mb_s']:.1f} | "
                        f"{x(c['mb_s'], u['mb_s'])} | {x(c['mb_s'], n['mb_s'])} | {c['lat_mean_ms']:.2f} | "
                        f"{cpu(u)} | {cpu(c)} | {cpu(n)} | {threads(c)} / {threads(n)} |")
    if not rows:
        return []
    return ["### IOMeter: 1 MB sequential and 4 KB random reads by several workers (queue depth 1 each)", "",
            "| workload | uncached MB/s | cachectl MB/s | nbdkit-cache MB/s | cachectl speedup | cachectl / peer | "
            "cachectl mean ms | uncached CPU us per I/O | cachectl CPU us per I/O (daemon + fio) | "
            "peer CPU us per I/O (daemon + fio) | "
            "daemon threads, cachectl / peer |", "|---|---|---|---|---|---|---|---|---|---|---|"] + rows + [""]


def latency_plots(pts, plots):
    """One PNG per workload: mean latency against achieved IOPS, a curve per configuration."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lines = []
    for workload, title in (("4k-randread", "4 KiB random read"), ("sql-8k-70r30w", "SQL 8 KiB, 70 % reads")):
        curves = {cfg: pts.curve(workload, cfg) for cfg in CONFIGS}
        if not all(curves.values()):
            continue
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
        for cfg, curve in curves.items():
            ax.plot([p["iops"] for p in curve], [p["lat_mean_ms"] for p in curve], marker="o", label=cfg)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("IOPS achieved")
        ax.set_ylabel("mean latency, ms")
        ax.set_title(f"{title}: latency against load (emulated 7,200 rpm disk)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        name = f"latency-{workload}.png"
        fig.tight_layout()
        fig.savefig(os.path.join(plots, name))
        plt.close(fig)
        lines += [f"![{title}: latency against load](bench/{name})", "",
                  "| load | " + " | ".join(f"{c} IOPS / mean / p99 ms / CPU us per I/O" for c in CONFIGS) + " |",
                  "|---|---|---|---|"]
        for i, p in enumerate(curves["uncached"]):
            cells = []
            for cfg in CONFIGS:
                q = curves[cfg][i] if i < len(curves[cfg]) else None
                cells.append(f"{q['iops']:.0f} / {q['lat_mean_ms']:.2f} / {q['lat_p99_ms']:.2f} / {cpu_total(q)}"
                             if q else "-")
            lines.append(f"| {p['load_pct']} % | " + " | ".join(cells) + " |")
        lines.append("")
    if lines:
        lines = ["### Latency against load", "",
                 "Each configuration's peak at queue depth 16 is measured first; fio then offers 10 % to 120 % "
                 "of that rate (Poisson arrivals, `--rate_iops`). CPU per I/O is the daemon's and fio's together "
                 "(each part in the results JSON).", ""] + lines
    return lines


def hit_table(pts):
    rows = []
    for workload in ("hit-4k-randread-qd32", "hit-64k-read-qd16", "hit-64k-randread-qd16", "hit-4k-randread-qd128"):
        got = {c: pts.get(workload, c)
               for c in ("cachectl", "nbdkit-file", "nbdkit-file-nocache", "nbdkit-memory", "ssd-direct")}
        if all(got.values()):
            cells = " | ".join(f"{got[c]['iops']:.0f} IOPS, {got[c]['mb_s']:.0f} MB/s, CPU {cpu(got[c], ' us')}"
                               for c in got)
            rows.append(f"| {workload} | {cells} | {got['cachectl']['iops'] / got['nbdkit-file']['iops']:.2f} | "
                        f"{got['cachectl']['iops'] / got['nbdkit-file-nocache']['iops']:.2f} | "
                        f"{got['cachectl']['iops'] / got['ssd-direct']['iops']:.2f} | "
                        f"{threads(got['cachectl'])} / {threads(got['nbdkit-file'])} / "
                        f"{threads(got['nbdkit-memory'])} |")
    if not rows:
        return []
    return ["### The hit path against the limit (100 % hits)", "",
            "CPU per I/O in each cell: total (daemon + fio), in microseconds.", "",
            "| workload | cachectl | nbdkit file (SSD file through the page cache) | "
            "nbdkit file, cache=none (meant to read every block from the SSD, through NBD) | nbdkit memory | "
            "fio io_uring O_DIRECT on the SSD file (no NBD) | cachectl / nbdkit file | "
            "cachectl / nbdkit file cache=none | cachectl / O_DIRECT | "
            "daemon threads, cachectl / nbdkit file / nbdkit memory |",
            "|---|---|---|---|---|---|---|---|---|---|"] + rows + [""]


def flush_lines(results):
    f = results.get("flush")
    if not f:
        return []
    return ["### Flush", "",
            f"{f['lines']} dirty 4 KiB lines scattered over the whole emulated disk: `cachectl flush` took "
            f"{f['flush_seconds']:.1f} s ({f['mb_s']:.2f} MB/s, {100 * f['mb_s'] / f['disk_seq_mb_s']:.2f} % of the "
            f"disk's {f['disk_seq_mb_s']} MB/s sequential bandwidth); the disk itself took {f['disk_direct_seconds']:.1f} s "
            f"to write the same blocks from fio at queue depth 32 (flush / direct = "
            f"{f['flush_seconds'] / f['disk_direct_seconds']:.2f}).", ""]


def metadata_lines(results):
    rows = results.get("metadata")
    if not rows:
        return []
    lines = ["### Metadata", "",
             "Measured on the engine (`cachectl-meta-bench`) over files with libaio and O_DIRECT and a RocksDB "
             "store, 4 KiB lines, queue depth 1, an origin four times the cache. RAM is the process's growth "
             "from before the store and the engine's tables exist (after a 64-line cache was made, used and "
             "removed, so that the libraries' code pages and the allocator's arenas are paid once, not per "
             "line), measured with RocksDB's memtables written out and freed heap returned (the allocator set as "
             "cachectl sets it: `ReturnFreedMemoryPromptly`), its block cache "
             "(which holds the tables' index blocks) taken out; the memtables as the run left them (their "
             "arenas and, estimated, the vector memtable's entry pointers) and the block cache are shown "
             "apart, with their caps: they do not grow with the cache. Filled clean: every line read in. "
             "Dirty, ghost full: then twice the cache read through it (every line evicted, the policy's ghost "
             "full) and every line it holds written (write-back). A start's time includes opening the store "
             "(its log replayed after a crash); after a clean shutdown the start copies the slot table from "
             "the snapshot that shutdown wrote (its size per line in brackets).", "",
             "| lines | RAM per line: empty / filled clean / dirty, ghost full / after a restart | "
             "RocksDB memtables / block cache (cap) | store on disk per line | "
             "start after a crash, every line dirty (of it, the store) | start after a clean shutdown | "
             "RocksDB bytes per 4K write, write-back / write-through | "
             "4K random-write IOPS, write-back / write-through | flush of every line |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "writethrough_4k_iops" in r:
            store = f"{r['writeback_store_bytes_per_write']:.0f} / {r['writethrough_store_bytes_per_write']:.0f}"
            iops = f"{r['writeback_4k_iops']:.0f} / {r['writethrough_4k_iops']:.0f}"
            flush = f"{r['flush_seconds']:.1f} s"
        elif "writeback_4k_iops" in r:  # too large to flush into an origin beside the cache here
            store = f"{r['writeback_store_bytes_per_write']:.0f} / not run"
            iops = f"{r['writeback_4k_iops']:.0f} / not run"
            flush = "not run"
        else:
            store, iops, flush = "not run", "not run", "not run"
        mib = lambda b: f"{b / 2**20:.0f} MiB"
        lines.append(f"| {r['lines']:,} | {r['rss_bytes_per_line_empty']:.1f} / {r['rss_bytes_per_line_clean']:.1f} / "
                     f"{r['rss_bytes_per_line']:.1f} / {r['rss_bytes_per_line_after_restart']:.1f} B | "
                     f"{mib(r['rocksdb_memtable_bytes'])} ({mib(r['rocksdb_memtable_cap_bytes'])}) / "
                     f"{mib(r['rocksdb_block_cache_bytes'])} ({mib(r['rocksdb_block_cache_cap_bytes'])}) | "
                     f"{r['store_bytes_on_disk_per_line']:.0f} B | "
                     f"{r['open_seconds_after_crash']:.2f} s ({r['store_open_seconds_after_crash']:.2f} s) | "
                     f"{r['open_seconds']:.2f} s{snapshot_note(r)} | {store} | {iops} | {flush} |")
    return lines + [""] + scale_lines(rows[-1])


def snapshot_note(r):
    if "clean_start_from_snapshot" not in r:  # a run from before the snapshot
        return ""
    if not r["clean_start_from_snapshot"]:
        return " (from the records: no snapshot taken)"
    return f" (snapshot: {r['snapshot_bytes_per_line']:.0f} B a line on disk)"


def scale_lines(r):
    """A 4 TB SSD in front of a 100 TB array, worked out from the measured per-line costs."""
    ssd = 4e12
    per_line_fixed = r["rss_bytes_per_line"] - BLOCK_STATE_BYTES  # measured with one block per line
    out = ["### Scale: a 4 TB SSD in front of a 100 TB array", ""]
    origin = 100e12
    fifo_bits = lambda n: max(1, (int(n) - 1).bit_length())  # the policy's ring entries (SlotFifo)
    for line_kib in (64, 4):
        lines = ssd / (line_kib * 1024)
        # What the measured run did not pay: origin lines past 2^32 take a
        # fifth byte; more slots take wider ring entries.
        wide = 1 if origin / (line_kib * 1024) >= 2**32 - 1 else 0
        per_line = per_line_fixed + wide + (fifo_bits(lines) - fifo_bits(r["lines"])) / 8
        ram = lines * (per_line + BLOCK_STATE_BYTES * line_kib // 4)
        store = lines * (r["store_bytes_on_disk_per_line"] + 5 * (line_kib // 4 - 1))
        restart = r["open_seconds_after_crash"] / r["lines"] * lines
        clean = r["open_seconds"] / r["lines"] * lines
        out.append(f"- {line_kib} KiB lines: {lines / 1e6:,.0f} million lines; RAM about {ram / 2**30:,.1f} GiB "
                   f"({per_line:.1f} B per line{', origin lines in 5 bytes' if wide else ''}, ring entries of "
                   f"{fifo_bits(lines)} bits, plus {BLOCK_STATE_BYTES} B per 4 KiB block), the store about "
                   f"{store / 2**30:,.1f} GiB on disk (5 B more per extra block in a record), a start after a crash "
                   f"about {restart:,.0f} s (it grows with the records), after a clean shutdown about "
                   f"{clean:,.0f} s (it grows with the lines).")
    out += ["- The dirty-region map stays 64 KiB: over 100 TB each of its 256Ki regions covers about 400 MB, so "
            "after a lost store `cachectl check` names stale ranges at that granularity.",
            f"- Figures scale linearly from {r['lines']:,} lines, measured; RAM per line is the dirty figure with "
            "the ghost full, the largest; RocksDB's memtables and block cache come on top, bounded by their "
            "caps.", ""]
    return out


def policy_table(results):
    if not results.get("policy"):
        return []
    rows = results["policy"]
    lines = ["### Policy: block hit ratio of `cachectl replay` against the reference columns", "",
             "cachectl: the adaptive default; its shape at the end of the trace (and how many times it switched).", "",
             "| trace | size | cachectl | its choice at the end | LRU | ARC | S3-FIFO T2 | W-TinyLFU | best reference "
             "| cachectl - best |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ref = r["reference"]
        best = max(ref.values())
        choice = r.get("choice", "").replace("adaptive: ", "")
        lines.append(f"| {r['trace']} | {r['size_pct']} % | {r['cachectl']:.4f} | {choice} | {ref['LRU']:.4f} | "
                     f"{ref['ARC']:.4f} | {ref['S3-FIFO T2']:.4f} | {ref['W-TinyLFU']:.4f} | {best:.4f} | "
                     f"{r['cachectl'] - best:+.4f} |")
    lines.append("")
    lines += policy_summary(rows)
    return lines + candidate_table(rows)


def policy_summary(rows):
    """The goal's two tests (every cell within 0.002 of its best column; the mean at 10 % above the best
    column's mean), and the cost of the adaptive policy's shadows in replay time."""
    short = [r for r in rows if r["cachectl"] < max(r["reference"].values()) - 0.002]
    tens = [r for r in rows if r["size_pct"] == 10]
    lines = [f"Within 0.002 of the best column: {len(rows) - len(short)} of {len(rows)} cells"
             + (" (short: " + ", ".join(f"{r['trace']} {r['size_pct']} % by "
                                        f"{max(r['reference'].values()) - 0.002 - r['cachectl']:.4f}" for r in short)
                + ")." if short else ".")]
    if tens:
        ours = sum(r["cachectl"] for r in tens) / len(tens)
        columns = tens[0]["reference"].keys()
        best_name, best_mean = max(((n, sum(r["reference"][n] for r in tens) / len(tens)) for n in columns),
                                   key=lambda c: c[1])
        lines.append(f"Mean at 10 %: cachectl {ours:.4f}, the best column's ({best_name}) {best_mean:.4f}.")
    timed = [r for r in rows if "S3-FIFO T2" in r.get("seconds", {})]
    if timed:
        accesses = sum(r["accesses"] for r in timed) / 1e6
        ours = sum(r["seconds"]["cachectl"] for r in timed) / accesses
        s3 = sum(r["seconds"]["S3-FIFO T2"] for r in timed) / accesses
        lines.append(f"Replay time per million block accesses (the whole engine, one run at a time): adaptive "
                     f"{ours:.2f} s, S3-FIFO T2 {s3:.2f} s.")
    return lines + [""]


def candidate_table(rows):
    """Each candidate `replay --policy` runs, through the engine, beside its README column."""
    names = [n for n in ("S3-FIFO T2", "S3-FIFO T1", "LRU", "ARC", "W-TinyLFU")
             if any(n in r.get("candidates", {}) for r in rows)]
    if not names:
        return []
    lines = ["Each candidate through the engine (`cachectl replay --policy`), and in brackets the difference "
             "from its column in ../shared/traces/README.md:", "",
             "| trace | size | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for r in rows:
        cells = []
        for n in names:
            ours = r["candidates"].get(n)
            cells.append("-" if ours is None else f"{ours:.4f} ({ours - r['reference'][n]:+.4f})")
        lines.append(f"| {r['trace']} | {r['size_pct']} % | " + " | ".join(cells) + " |")
    return lines + [""]


def report(results, plots):
    os.makedirs(plots, exist_ok=True)
    pts = Points(results)
    m = results["machine"]
    lines = [f"Run: {results['date']}, {results['mode']} mode, {results['seconds_per_point']} s per point, "
             f"working set {results['working_set_mib']} MiB, {m['cpus']} CPUs ({m['cpu']}), kernel {m['kernel']}.", ""]
    if any(p.get("cpu_us_per_io") is not None for p in pts.points):
        lines += ["CPU us per I/O: microseconds of CPU per I/O completed over each point, the server's (daemon) "
                  "and fio's (client), \"total (daemon + fio)\"; daemon threads: the most seen while fio ran "
                  "(see \"CPU per I/O and threads\" above).", ""]
    lines += randread_table(pts) + profile_table(pts) + iometer_table(pts) + latency_plots(pts, plots)
    lines += flush_lines(results) + bench_pressure.report_lines(results, plots) + hit_table(pts)
    lines += metadata_lines(results) + policy_table(results) + bench_tls.report_lines(results)
    lines += bench_volumes.report_lines(results)
    lines += bench_encryption.report_lines(results)
    lines += bench_ram.report_lines(results)
    return "\n".join(lines)


def update_docs(path, text, command, source):
    """Replaces the block between the results markers of `path` with the report."""
    block = (f"<!-- results:begin -->\n{text}\nReproduce: `{command}` (results JSON: `{source}`).\n"
             "<!-- results:end -->")
    doc = open(path).read()
    updated = re.sub(r"<!-- results:begin -->.*?<!-- results:end -->", lambda m: block, doc, flags=re.S)
    if updated == doc and block not in doc:
        raise SystemExit(f"bench: {path} has no results block (<!-- results:begin --> ... <!-- results:end -->)")
    open(path, "w").write(updated)
