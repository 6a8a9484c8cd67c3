#!/usr/bin/python3
"""cachectl benchmarks: every configuration measured in the same run, on the
same machine, reported as ratios against a peer (absolute numbers are noted
but not trusted: these machines are shared and noisy).

Configurations, all over the same emulated 7,200 rpm disk (cachectl-hdd-emu):
  uncached      the client talks to the emulated disk directly
  cachectl-wt   cachectl in write-through, its origin the emulated disk (NBD URI)
  nbdkit-cache  the peer: nbdkit's cache filter in front of the same disk
And for the hit path, against the limit:
  nbdkit-file   nbdkit's file plugin serving the SSD file (no caching work)
  nbdkit-memory nbdkit's memory plugin (the protocol's ceiling here)

usage: bench.py --build DIR --out RESULTS.json [--quick | --full]
Writes RESULTS.json and prints a markdown report on stdout.
"""
import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20


class Proc:
    """A server started for the run and stopped by its process id."""

    def __init__(self, argv, socket):
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(100):
            if os.path.exists(socket):
                return
            if self.p.poll() is not None:
                raise SystemExit(f"bench: {argv[0]} exited: {self.p.stderr.read().decode()}")
            time.sleep(0.05)
        raise SystemExit(f"bench: {argv[0]} did not create {socket}")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            self.p.wait(timeout=30)


def uri(socket, export=""):
    return f"nbd+unix:///{export}?socket={socket}"


def fio(target, rw, bs, depth, seconds, size, extra=()):
    """One fio job through its nbd engine; returns IOPS, MB/s, mean and p99 latency (ms)."""
    cmd = ["fio", "--name=b", "--ioengine=nbd", f"--uri={target}", f"--rw={rw}", f"--bs={bs}",
           f"--iodepth={depth}", f"--runtime={seconds}", "--time_based", f"--size={size}",
           "--output-format=json", "--randrepeat=1", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    total_iops = job["read"]["iops"] + job["write"]["iops"]
    total_bw = (job["read"]["bw_bytes"] + job["write"]["bw_bytes"]) / 1e6
    side = job["read"] if job["read"]["iops"] >= job["write"]["iops"] else job["write"]
    lat = side["clat_ns"]
    p99 = lat.get("percentile", {}).get("99.000000", 0) / 1e6
    return {"iops": round(total_iops, 1), "mb_s": round(total_bw, 2),
            "lat_mean_ms": round(lat["mean"] / 1e6, 3), "lat_p99_ms": round(p99, 3)}


def cachectl(build, env, *args):
    subprocess.run([f"{build}/cachectl/cachectl", *args], env=env, check=True,
                   stdout=subprocess.DEVNULL)


def warm(target, size):
    """Reads the working set once, in order and one request at a time (on the
    emulated disk, interleaved streams would each pay a seek)."""
    subprocess.run(["fio", "--name=warm", "--ioengine=nbd", f"--uri={target}", "--rw=read",
                    "--bs=1M", "--iodepth=1", f"--size={size}"], check=True, capture_output=True)


def run(args):
    quick = not args.full
    seconds = 8 if quick else 30
    working_set = 256 * MiB if quick else 2048 * MiB
    w = tempfile.mkdtemp(prefix="cachectl-bench-")
    env = dict(os.environ, CACHECTL_RUN_DIR=f"{w}/run", CACHECTL_STATE_DIR=f"{w}/state")
    procs = []
    results = {"mode": "quick" if quick else "full", "seconds_per_point": seconds,
               "working_set_mib": working_set // MiB,
               "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                           "cpu": platform.processor() or platform.machine()},
               "date": time.strftime("%Y-%m-%d"), "points": []}
    try:
        origin, ssd = f"{w}/origin.img", f"{w}/ssd.img"
        for path, size in ((origin, 4 * working_set), (ssd, working_set + 64 * MiB)):
            with open(path, "wb") as f:
                f.truncate(size)
        hdd = f"{w}/hdd.sock"
        procs.append(Proc([f"{args.build}/scripts/bench/cachectl-hdd-emu", "--file", origin,
                           "--socket", hdd], hdd))
        # The peer: nbdkit's cache filter over the same disk, caching reads.
        peer = f"{w}/peer.sock"
        procs.append(Proc(["nbdkit", "--foreground", "-U", peer, "--filter=cache", "nbd",
                           f"socket={hdd}", "cache-on-read=true"], peer))
        cachectl(args.build, env, "attach", "--origin", uri(hdd), "--cache", ssd, "--name", "bench",
                 "--mode", "writethrough", "--line-size", "4K", "--frontend", "socket")
        cachectl(args.build, env, "set", "bench", "--seq-cutoff", "0")
        ours = uri(f"{w}/run/bench/nbd", "bench")
        size = f"{working_set // MiB}M"

        def point(name, config, target, rw, bs, depth, extra=()):
            r = fio(target, rw, bs, depth, seconds, size, extra)
            r.update({"workload": name, "config": config})
            results["points"].append(r)
            print(f"  {name:28s} {config:14s} {r['iops']:>10.0f} IOPS {r['lat_mean_ms']:>8.2f} ms",
                  file=sys.stderr)

        print("== 4K random read on the emulated disk, after a warm-up", file=sys.stderr)
        point("4k-randread-qd32", "uncached", uri(hdd), "randread", "4k", 32)
        for config, target in (("cachectl-wt", ours), ("nbdkit-cache", uri(peer))):
            warm(target, size)
            point("4k-randread-qd32", config, target, "randread", "4k", 32)

        print("== the seed profiles on the emulated disk (working set warm in every cache)", file=sys.stderr)
        profiles = [("4k-randread", "randread", "4k", 16, ()),
                    ("4k-randwrite", "randwrite", "4k", 16, ()),
                    ("64k-seqread", "read", "64k", 16, ()),
                    ("64k-seqwrite", "write", "64k", 16, ()),
                    ("sql-8k-70r30w", "randrw", "8k", 16, ("--rwmixread=70",))]
        if not quick:
            profiles += [("oracle-8k-90r10w", "randrw", "8k", 16, ("--rwmixread=90",)),
                         ("sql-8k-80r20w", "randrw", "8k", 16, ("--rwmixread=80",))]
        for name, rw, bs, depth, extra in profiles:
            writes = rw != "read" and rw != "randread"
            # Write profiles use write-back (the peer's cache filter is write-back too).
            cachectl(args.build, env, "set", "bench", "--mode", "writeback" if writes else "writethrough")
            for config, target in (("uncached", uri(hdd)), ("cachectl", ours), ("nbdkit-cache", uri(peer))):
                point(name, config, target, rw, bs, depth, extra)
        cachectl(args.build, env, "set", "bench", "--mode", "writethrough")

        print("== the hit path, against the limit", file=sys.stderr)
        ssd_peer = f"{w}/ssdfile.sock"
        procs.append(Proc(["nbdkit", "--foreground", "-U", ssd_peer, "file", f"file={ssd}"], ssd_peer))
        mem = f"{w}/mem.sock"
        procs.append(Proc(["nbdkit", "--foreground", "-U", mem, "memory", f"size={working_set}"], mem))
        for config, target in (("cachectl-wt", ours), ("nbdkit-file", uri(ssd_peer)),
                               ("nbdkit-memory", uri(mem))):
            point("hit-4k-randread-qd32", config, target, "randread", "4k", 32)
            point("hit-64k-read-qd16", config, target, "read", "64k", 16)
        cachectl(args.build, env, "detach", "bench")
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(w, ignore_errors=True)
    results["policy"] = policy(args.build)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    return results


def reference_ratios():
    """The reference table of ../shared/traces/README.md: {(trace, pct): {policy: ratio}}."""
    here = os.path.dirname(os.path.abspath(__file__))
    readme = os.path.join(here, "..", "..", "..", "shared", "traces", "README.md")
    table, trace, header = {}, None, None
    for line in open(readme):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0] == "trace":
            header = cells[2:]
        elif header and len(cells) == 8 and cells[1].endswith("%"):
            trace = cells[0] or trace
            table[(trace, int(cells[1].rstrip(" %")))] = dict(zip(header, (float(c) for c in cells[2:])))
    return table


def policy(build):
    """cachectl replay on every shared trace at 1, 5 and 10 % of its footprint."""
    print("== policy: replay of the shared traces", file=sys.stderr)
    rows = []
    traces = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "traces")
    for (trace, pct), ref in sorted(reference_ratios().items()):
        out = subprocess.run([f"{build}/cachectl/cachectl", "replay", "--trace",
                              os.path.join(traces, trace + ".csv.zst"), "--cache-size", f"{pct}%", "--json"],
                             capture_output=True, text=True, check=True).stdout
        ours = json.loads(out)["hit_ratio"]
        rows.append({"trace": trace, "size_pct": pct, "cachectl": round(ours, 4), "reference": ref})
        print(f"  {trace:24s} {pct:3d}% cachectl {ours:.4f}  best {max(ref.values()):.4f}", file=sys.stderr)
    return rows


def report(results):
    def get(workload, config):
        for p in results["points"]:
            if p["workload"] == workload and p["config"] == config:
                return p
        return None

    lines = [f"Run: {results['date']}, {results['mode']} mode, {results['seconds_per_point']} s per point, "
             f"working set {results['working_set_mib']} MiB, {results['machine']['cpus']} CPUs, "
             f"kernel {results['machine']['kernel']}.", ""]
    lines += ["### 4 KiB random read, queue depth 32, on the emulated disk (warm cache)", "",
              "| configuration | IOPS | MB/s | mean ms | p99 ms | speedup over uncached |",
              "|---|---|---|---|---|---|"]
    base = get("4k-randread-qd32", "uncached")
    for config in ("uncached", "cachectl-wt", "nbdkit-cache"):
        p = get("4k-randread-qd32", config)
        if p:
            lines.append(f"| {config} | {p['iops']:.0f} | {p['mb_s']:.1f} | {p['lat_mean_ms']:.2f} | "
                         f"{p['lat_p99_ms']:.2f} | {p['iops'] / base['iops']:.1f}x |")
    lines += ["", "QNAP's published SSD-cache speedup for 4K random read: 27.8x.", ""]
    lines += ["### Seed profiles on the emulated disk (queue depth 16, working set warm)", "",
              "Write profiles run cachectl in write-back (nbdkit's cache filter is write-back by default).", "",
              "| profile | uncached IOPS | cachectl IOPS | nbdkit-cache IOPS | cachectl speedup | peer speedup | "
              "cachectl mean / p99 ms | QNAP SSD-cache speedup |",
              "|---|---|---|---|---|---|---|---|"]
    qnap = {"4k-randread": "27.8x", "4k-randwrite": "93x", "64k-seqread": "2.2x", "64k-seqwrite": "3.4x"}
    for name in ("4k-randread", "4k-randwrite", "64k-seqread", "64k-seqwrite", "sql-8k-70r30w",
                 "oracle-8k-90r10w", "sql-8k-80r20w"):
        u, c, n = (get(name, x) for x in ("uncached", "cachectl", "nbdkit-cache"))
        if u and c and n:
            lines.append(f"| {name} | {u['iops']:.0f} | {c['iops']:.0f} | {n['iops']:.0f} | "
                         f"{c['iops'] / u['iops']:.1f}x | {n['iops'] / u['iops']:.1f}x | "
                         f"{c['lat_mean_ms']:.2f} / {c['lat_p99_ms']:.2f} | {qnap.get(name, '')} |")
    lines += [""]
    lines += ["### The hit path against the limit (100 % hits)", "",
              "| workload | cachectl | nbdkit file (SSD file, no caching work) | nbdkit memory | cachectl / nbdkit file |",
              "|---|---|---|---|---|"]
    for workload in ("hit-4k-randread-qd32", "hit-64k-read-qd16"):
        ours, f, m = (get(workload, c) for c in ("cachectl-wt", "nbdkit-file", "nbdkit-memory"))
        if ours and f and m:
            lines.append(f"| {workload} | {ours['iops']:.0f} IOPS, {ours['mb_s']:.0f} MB/s | "
                         f"{f['iops']:.0f} IOPS, {f['mb_s']:.0f} MB/s | {m['iops']:.0f} IOPS, "
                         f"{m['mb_s']:.0f} MB/s | {ours['iops'] / f['iops']:.2f} |")
    if results.get("policy"):
        lines += ["", "### Policy: block hit ratio of `cachectl replay` against the reference columns", "",
                  "| trace | size | cachectl | LRU | ARC | S3-FIFO T2 | best reference | cachectl - best |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in results["policy"]:
            ref = r["reference"]
            best = max(ref.values())
            lines.append(f"| {r['trace']} | {r['size_pct']} % | {r['cachectl']:.4f} | {ref['LRU']:.4f} | "
                         f"{ref['ARC']:.4f} | {ref['S3-FIFO T2']:.4f} | {best:.4f} | {r['cachectl'] - best:+.4f} |")
    return "\n".join(lines) + "\n"


def main():
    # SIGTERM ends the run through the cleanup in run(): servers stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true")
    mode.add_argument("--full", action="store_true")
    args = ap.parse_args()
    print(report(run(args)))


if __name__ == "__main__":
    main()
