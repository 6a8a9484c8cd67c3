#!/usr/bin/python3
"""cachectl benchmarks: every configuration measured in the same run, on the
same machine, reported as ratios against a peer (absolute numbers are noted
but not trusted: these machines are shared and noisy).

Every point also records the CPU it cost, in microseconds per I/O completed:
fio's (the client: user and system time of fio and its job processes, from
wait4, less fio's own start-up measured once per run on its null engine) and
the server's (the daemon: utime + stime of every thread, from /proc/PID/stat,
before and after fio), and the daemon's most threads (sampled from
/proc/PID/status every 50 ms while fio runs). The emulated disk's CPU is
kept apart (it stands for hardware).

Configurations, all over the same emulated 7,200 rpm disk (cachectl-hdd-emu):
  uncached      the client talks to the emulated disk directly
  cachectl      cachectl, its origin the emulated disk (NBD URI); write-through
                for read profiles, write-back for profiles that write
  nbdkit-cache  the peer: nbdkit's cache filter in front of the same disk
And for the hit path, against the limit:
  nbdkit-file   nbdkit's file plugin serving the SSD file (no caching work)
  nbdkit-file-nocache  the same with cache=none: every read from the SSD
                through NBD (what NBD and the device cost together)
  nbdkit-memory nbdkit's memory plugin (the protocol's ceiling here)
  ssd-direct    fio with io_uring and O_DIRECT on the SSD file (the device's own)

usage: bench.py --build DIR --out RESULTS.json --plots DIR [--quick | --full | --smoke]
                [--only SECTION,...] [--docs docs/benchmarks.md]
       bench.py --from-json RESULTS.json --plots DIR [--docs docs/benchmarks.md]
With --docs, the report replaces the results block of that file; with
--from-json, nothing is measured: the report is made again from a run's file.
--smoke runs every section for a second or so per point, on small sizes: a
check that the harness works (tests/bench_smoke_test.sh), not a measurement.
Writes RESULTS.json and the plots, and prints a markdown report on stdout.
"""
import argparse
import concurrent.futures
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench_lib import MiB, Proc, cachectl, calibrate_fio, fio, fio_direct, uri, warm
import bench_pressure
import bench_report
import bench_tls
import bench_volumes
import bench_encryption
import bench_ram

SECTIONS = ("randread", "profiles", "iometer", "latency", "flush", "pressure", "hit", "metadata", "policy", "tls",
            "volumes", "encryption", "ram")
HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = os.path.join(HERE, "..", "..", "..", "shared", "traces")


# The hit section's points: the two, 64 KiB at random too (a peer
# reading through the page cache gets the kernel's readahead on sequential
# reads, so only random reads compare its device reads with ours), and 4 KiB
# at depth 128, where an NBD client's round trip no longer hides the SSD's
# own ceiling.
HIT_POINTS = (("hit-4k-randread-qd32", "randread", "4k", 32), ("hit-64k-read-qd16", "read", "64k", 16),
              ("hit-64k-randread-qd16", "randread", "64k", 16), ("hit-4k-randread-qd128", "randread", "4k", 128))


def evict_from_page_cache(path):
    """Drops the file's clean pages from the page cache (cachectl reads it
    with O_DIRECT: only a peer reading through the page cache notices)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def log(text):
    print(text, file=sys.stderr, flush=True)


def log_point(r):
    daemon = r["daemon_cpu_us_per_io"]
    log(f"  {r['workload']:28s} {r['config']:14s} {r['iops']:>10.0f} IOPS {r['lat_mean_ms']:>8.2f} ms "
        f"CPU/IO {r['cpu_us_per_io']:>7.1f} us (daemon {'-' if daemon is None else f'{daemon:.1f}'}, "
        f"fio {r['client_cpu_us_per_io']:.1f}) threads {r['daemon_threads'] or '-'}")


class Bench:
    def __init__(self, args):
        self.args = args
        self.smoke = args.smoke
        self.quick = not args.full
        self.seconds = 1 if self.smoke else 5 if self.quick else 30
        self.working_set = 32 * MiB if self.smoke else 256 * MiB if self.quick else 2048 * MiB
        self.size = f"{self.working_set // MiB}M"
        self.w = tempfile.mkdtemp(prefix="cachectl-bench-")
        self.env = dict(os.environ, CACHECTL_RUN_DIR=f"{self.w}/run", CACHECTL_STATE_DIR=f"{self.w}/state")
        self.procs = []
        self.results = {"mode": "smoke" if self.smoke else "quick" if self.quick else "full", "seconds_per_point": self.seconds,
                        "working_set_mib": self.working_set // MiB,
                        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                                    "cpu": platform.processor() or platform.machine()},
                        "date": time.strftime("%Y-%m-%d"), "points": []}

    # ---- set-up
    def start(self):
        self.results["fio_startup_cpu_seconds"] = round(calibrate_fio(), 3)
        self.origin, self.ssd = f"{self.w}/origin.img", f"{self.w}/ssd.img"
        self.origin_size = 4 * self.working_set
        for path, size in ((self.origin, self.origin_size), (self.ssd, self.working_set + 64 * MiB)):
            with open(path, "wb") as f:
                f.truncate(size)
        hdd = f"{self.w}/hdd.sock"
        self.disk = Proc([f"{self.args.build}/scripts/bench/cachectl-hdd-emu", "--file", self.origin,
                          "--socket", hdd], hdd)
        self.procs.append(self.disk)
        peer = f"{self.w}/peer.sock"  # nbdkit's cache filter over the same disk, caching reads
        self.procs.append(Proc(["nbdkit", "--foreground", "-U", peer, "--filter=cache", "nbd",
                                f"socket={hdd}", "cache-on-read=true"], peer))
        self.daemons = {"nbdkit-cache": self.procs[-1].pid}  # configuration: its server's process id
        self.cachectl("attach", "--origin", uri(hdd), "--cache", self.ssd, "--name", "bench",
                      "--mode", "writethrough", "--line-size", "4K", "--frontend", "socket")
        self.cachectl("set", "bench", "--seq-cutoff", "0")
        self.targets = {"uncached": uri(hdd), "cachectl": uri(f"{self.w}/run/bench/nbd", "bench"),
                        "nbdkit-cache": uri(peer)}

    def stop(self):
        try:
            self.cachectl("detach", "bench")
        finally:
            for p in reversed(self.procs):
                p.stop()
            shutil.rmtree(self.w, ignore_errors=True)

    def cachectl(self, *args):
        cachectl(self.args.build, self.env, *args)

    def servers(self, config):
        """The processes whose CPU a point of `config` counts (bench_lib.Servers)."""
        if config in ("cachectl", "cachectl-wt", "cachectl-ram"):  # the daemon writes its id once it serves
            with open(f"{self.w}/run/bench/pid") as f:
                daemon = int(f.read())
        else:
            daemon = self.daemons.get(config)
        disk = self.disk.pid if config in ("uncached", "cachectl", "cachectl-wt", "nbdkit-cache") else None
        return {"daemon": daemon, "disk": disk}

    def mode(self, writes):
        self.cachectl("set", "bench", "--mode", "writeback" if writes else "writethrough")

    def stats(self):
        """`cachectl stats bench --json`, parsed."""
        out = subprocess.run([f"{self.args.build}/cachectl/cachectl", "stats", "bench", "--json"], env=self.env,
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    def fio(self, config, target, rw, bs, depth, seconds, extra=()):
        """One fio job on `config`."""
        return fio(target, rw, bs, depth, seconds, self.size, extra, self.servers(config))

    def point(self, name, config, target, rw, bs, depth, extra=(), **tags):
        r = self.fio(config, target, rw, bs, depth, tags.pop("seconds", self.seconds), extra)
        r.update({"workload": name, "config": config, **tags})
        self.results["points"].append(r)
        log_point(r)
        return r

    # ---- sections
    def randread(self):
        log("== 4K random read on the emulated disk, after a warm-up")
        self.point("4k-randread-qd32", "uncached", self.targets["uncached"], "randread", "4k", 32)
        for config in ("cachectl", "nbdkit-cache"):
            warm(self.targets[config], self.size)
            self.point("4k-randread-qd32", config, self.targets[config], "randread", "4k", 32)

    def profile_list(self):
        profiles = [("4k-randread", "randread", "4k", ()), ("4k-randwrite", "randwrite", "4k", ()),
                    ("64k-seqread", "read", "64k", ()), ("64k-seqwrite", "write", "64k", ()),
                    ("sql-8k-70r30w", "randrw", "8k", ("--rwmixread=70",))]
        if not self.quick:
            profiles += [("oracle-8k-90r10w", "randrw", "8k", ("--rwmixread=90",)),
                         ("sql-8k-80r20w", "randrw", "8k", ("--rwmixread=80",))]
        return profiles

    def profiles(self):
        log("== the seed profiles on the emulated disk (working set warm in every cache)")
        # Reads first, in write-through; then the writes in write-back (the
        # peer's cache filter is write-back too): one switch, and no switch
        # back (leaving write-back would clean every dirty line first, which
        # on the emulated disk takes minutes; the flush section measures
        # cleaning on its own terms).
        profiles = sorted(self.profile_list(), key=lambda p: p[1] not in ("read", "randread"))
        self.mode(False)
        for name, rw, bs, extra in profiles:
            if name == "4k-randwrite":  # the same writes in write-through, for the mode's cost
                self.point(name, "cachectl-wt", self.targets["cachectl"], rw, bs, 16, extra)
            if rw not in ("read", "randread"):
                self.mode(True)
            for config, target in self.targets.items():
                self.point(name, config, target, rw, bs, 16, extra)

    def iometer(self):
        log("== IOMeter: 1 MB sequential and 4 KB random reads by 4, 8 and 16 workers")
        threads = (8,) if self.quick else (4, 8, 16)
        for n in threads:
            # Each worker streams its own part of the working set, as IOMeter's do.
            seq = ("--numjobs", str(n), f"--offset_increment={self.working_set // n}",
                   f"--size={self.working_set // n}")
            rnd = ("--numjobs", str(n))
            for config, target in self.targets.items():
                self.point(f"iometer-1m-seqread-{n}t", config, target, "read", "1m", 1, seq, threads=n)
                self.point(f"iometer-4k-randread-{n}t", config, target, "randread", "4k", 1, rnd, threads=n)

    def latency(self):
        log("== latency against load: the rate stepped up to 120 % of each configuration's peak")
        steps = (10, 50, 90, 120) if self.quick else (10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120)
        self.mode(True)  # reads are served alike in either mode; the SQL mix writes back
        for name, rw, bs, mix in (("4k-randread", "randread", "4k", 100), ("sql-8k-70r30w", "randrw", "8k", 70)):
            extra = (f"--rwmixread={mix}",) if mix < 100 else ()
            for config, target in self.targets.items():
                peak = self.point(name, config, target, rw, bs, 16, extra, curve="peak")["iops"]
                for pct in steps:
                    rate = max(1, int(peak * pct / 100))
                    limit = f"{max(1, rate * mix // 100)},{max(1, rate * (100 - mix) // 100)}"
                    self.point(name, config, target, rw, bs, 16,
                               extra + (f"--rate_iops={limit}", "--rate_process=poisson"),
                               curve="load", load_pct=pct, target_iops=rate, seconds=(self.seconds + 1) // 2)

    def flush(self):
        """N scattered dirty 4 KiB lines: the time to clean them against the
        time the disk takes to write the same blocks itself, and against its
        sequential bandwidth."""
        count = 100 if self.smoke else 2000 if self.quick else 20000
        log(f"== flush: {count} scattered dirty lines")
        self.mode(True)
        self.cachectl("flush", "bench")  # what earlier sections left dirty
        scatter = ["--number_ios", str(count), "--randseed=7", f"--size={self.origin_size}"]

        def scattered(target):
            cmd = ["fio", "--name=s", "--ioengine=nbd", f"--uri={target}", "--rw=randwrite", "--bs=4k",
                   "--iodepth=32", "--norandommap", *scatter, "--output-format=json"]
            started = time.monotonic()
            subprocess.run(cmd, check=True, capture_output=True)
            return time.monotonic() - started

        disk_s = scattered(self.targets["uncached"])
        scattered(self.targets["cachectl"])
        started = time.monotonic()
        self.cachectl("flush", "bench")
        flush_s = time.monotonic() - started
        self.mode(False)
        self.results["flush"] = {"lines": count, "flush_seconds": round(flush_s, 2),
                                 "disk_direct_seconds": round(disk_s, 2),
                                 "mb_s": round(count * 4096 / flush_s / 1e6, 3), "disk_seq_mb_s": 210}
        log(f"  flush {flush_s:.1f} s; the disk writing them itself at QD32 {disk_s:.1f} s")

    def pressure(self):
        bench_pressure.pressure(self, log, log_point)

    def tls(self):
        bench_tls.tls(self, log)

    def volumes(self):
        bench_volumes.volumes(self, log)

    def encryption(self):
        bench_encryption.encryption(self, log)

    def ram(self):
        bench_ram.ram(self, log, log_point)

    def hit(self):
        log("== the hit path, against the limit")
        ssd_peer, mem = f"{self.w}/ssdfile.sock", f"{self.w}/mem.sock"
        nocache = f"{self.w}/ssdnocache.sock"
        self.procs.append(Proc(["nbdkit", "--foreground", "-U", ssd_peer, "file", f"file={self.ssd}"], ssd_peer))
        self.daemons["nbdkit-file"] = self.procs[-1].pid
        self.procs.append(Proc(["nbdkit", "--foreground", "-U", nocache, "file", f"file={self.ssd}", "cache=none"],
                               nocache))
        self.daemons["nbdkit-file-nocache"] = self.procs[-1].pid
        self.procs.append(Proc(["nbdkit", "--foreground", "-U", mem, "memory", f"size={self.working_set}"], mem))
        self.daemons["nbdkit-memory"] = self.procs[-1].pid
        warm(self.targets["cachectl"], self.size)
        for config, target in (("cachectl", self.targets["cachectl"]), ("nbdkit-file", uri(ssd_peer)),
                               ("nbdkit-file-nocache", uri(nocache)), ("nbdkit-memory", uri(mem))):
            if config == "nbdkit-file-nocache":
                evict_from_page_cache(self.ssd)  # what nbdkit-file's points read stays there otherwise
            for name, rw, bs, depth in HIT_POINTS:
                self.point(name, config, target, rw, bs, depth)
        for name, rw, bs, depth in HIT_POINTS:
            r = fio_direct(self.ssd, rw, bs, depth, self.seconds)
            r.update({"workload": name, "config": "ssd-direct"})
            self.results["points"].append(r)
            log_point(r)

    def metadata(self):
        sizes = (20_000,) if self.smoke else (1_000_000,) if self.quick else (1_000_000, 10_000_000)
        overwrites = 2000 if self.smoke else 20000
        tool = f"{self.args.build}/scripts/bench/cachectl-meta-bench"
        run = lambda *a: json.loads(subprocess.run([tool, *a], check=True, capture_output=True,
                                                   text=True).stdout)
        rows = []
        for lines in sizes:
            # The cache file, and for the write rates (up to a million lines)
            # a second one with its flush into the origin.
            rates = lines <= 1_000_000
            need = lines * 4096 * (3 if rates else 1) + 2 * 2**30
            free = shutil.disk_usage(self.w).free
            if free < need:
                raise SystemExit(f"bench: the metadata section at {lines:,} lines needs {need / 2**30:.0f} GiB "
                                 f"free in {self.w}; there are {free / 2**30:.0f} GiB")
            log(f"== metadata: {lines} lines")
            d = tempfile.mkdtemp(prefix="cachectl-meta-", dir=self.w)
            row = run("fill", "--dir", d, "--lines", str(lines), "--crash")
            after_crash = run("open", "--dir", d)  # the fill ended without a shutdown
            after_clean = run("open", "--dir", d)  # the last open shut down cleanly
            shutil.rmtree(d, ignore_errors=True)
            assert not after_crash["after_clean_shutdown"] and after_clean["after_clean_shutdown"]
            row.update({"open_seconds_after_crash": after_crash["open_seconds"],
                        "store_open_seconds_after_crash": after_crash["store_open_seconds"],
                        "open_seconds": after_clean["open_seconds"],
                        "clean_start_from_snapshot": after_clean["from_snapshot"],
                        "snapshot_bytes_per_line": after_clean["snapshot_bytes_per_line"],
                        "store_open_seconds": after_clean["store_open_seconds"],
                        "rss_bytes_per_line_after_restart": after_clean["rss_bytes_per_line"],
                        "store_bytes_on_disk_per_line": after_clean["store_bytes_on_disk_per_line"]})
            if rates:
                d = tempfile.mkdtemp(prefix="cachectl-meta-", dir=self.w)
                writes = run("fill", "--dir", d, "--lines", str(lines), "--overwrites", str(overwrites))
                shutil.rmtree(d, ignore_errors=True)
                row.update({k: v for k, v in writes.items() if "iops" in k or "per_write" in k or k == "flush_seconds"})
            rows.append(row)
            log(f"  {row}")
        self.results["metadata"] = rows

    # Each candidate a replay can run, under its README column's name.
    CANDIDATES = {"S3-FIFO T2": ["--policy", "s3fifo"], "S3-FIFO T1": ["--policy", "s3fifo", "--promote-after", "0"],
                  "LRU": ["--policy", "lru"], "ARC": ["--policy", "arc"], "W-TinyLFU": ["--policy", "wtinylfu"]}

    def policy(self):
        """cachectl replay on every shared trace at 1, 5 and 10 % of its footprint: the default (adaptive)
        policy, what it chose, and (not in the smoke run) each candidate `replay --policy` runs, to set beside
        its README column; each run's seconds (a core each) for the cost per million accesses."""
        log("== policy: replay of the shared traces")
        cells = sorted(bench_report.reference_ratios(TRACES).items())
        cells = cells[:1] if self.smoke else cells
        runs = [(cell, "cachectl", []) for cell in cells]
        if not self.smoke:
            runs += [(cell, name, flags) for cell in cells for name, flags in self.CANDIDATES.items()]

        def replay(run):  # the hit ratio is deterministic: runs go side by side, a core each
            ((trace, pct), _), _, flags = run
            began = time.monotonic()
            out = subprocess.run([f"{self.args.build}/cachectl/cachectl", "replay", "--trace",
                                  os.path.join(TRACES, trace + ".csv.zst"), "--cache-size", f"{pct}%", "--json"]
                                 + flags, capture_output=True, text=True, check=True).stdout
            return json.loads(out), time.monotonic() - began
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            outcomes = list(pool.map(replay, runs))
        # The cost of the adaptive policy: the default and S3-FIFO T2 again, one run at a time (side by side,
        # runs slow each other by more than the policy costs).
        timed = [] if self.smoke else [run for run in runs if run[1] in ("cachectl", "S3-FIFO T2")]
        seconds_alone = {(run[0][0], run[1]): replay(run)[1] for run in timed}
        rows = {}
        for (((trace, pct), ref), name, _), (out, _seconds) in zip(runs, outcomes):
            row = rows.setdefault((trace, pct), {"trace": trace, "size_pct": pct, "reference": ref, "candidates": {},
                                                 "seconds": {}, "accesses": out["accesses"]})
            ratio = round(out["hit_ratio"], 4)
            if ((trace, pct), name) in seconds_alone:
                row["seconds"][name] = round(seconds_alone[((trace, pct), name)], 3)
            if name == "cachectl":
                row["cachectl"] = ratio
                row["choice"] = out.get("policy_state", "")
            else:
                row["candidates"][name] = ratio
        self.results["policy"] = list(rows.values())


def measure(args):
    only = args.only.split(",")
    unknown = [s for s in only if s not in SECTIONS]
    if unknown:
        raise SystemExit(f"bench: unknown section {unknown[0]}; sections: {', '.join(SECTIONS)}")
    bench = Bench(args)
    bench.results["sections"] = only
    bench.results["command"] = "bash scripts/bench/run.sh " + ("--full" if args.full else "--quick")
    def save():  # after every section: a run cut short keeps what it measured
        with open(args.out, "w") as f:
            json.dump(bench.results, f, indent=1)

    try:
        bench.start()
        for section in SECTIONS:
            if section in only:
                getattr(bench, section)()
                save()
    finally:
        bench.stop()
    return bench.results


def main():
    # SIGTERM ends the run through the cleanup in measure(): servers stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    ap = argparse.ArgumentParser()
    ap.add_argument("--build")
    ap.add_argument("--out")
    ap.add_argument("--plots", required=True)
    ap.add_argument("--docs", help="rewrite the results block of this markdown file")
    ap.add_argument("--from-json", help="report on an earlier run's results instead of measuring")
    ap.add_argument("--only", default=",".join(SECTIONS), help="sections to run: " + ",".join(SECTIONS))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true")
    mode.add_argument("--full", action="store_true")
    mode.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.from_json:
        results, source = json.load(open(args.from_json)), args.from_json
    elif args.build and args.out:
        results, source = measure(args), args.out
    else:
        raise SystemExit("bench: give --build and --out to measure, or --from-json to report on a run")
    text = bench_report.report(results, args.plots)
    print(text)
    if args.docs:
        bench_report.update_docs(args.docs, text, results.get("command", "bash scripts/bench/run.sh"), source)


if __name__ == "__main__":
    main()
