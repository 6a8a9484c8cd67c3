"""The volumes section of bench.py: one SSD for two volumes, shared (one
cache, `cachectl add`) against the same SSD split into two fixed halves
(two caches), side by side in one run. Each volume's origin is an emulated
disk (cachectl-hdd-emu). The volumes' working sets differ: a large one
(70 % of the SSD's lines) on the first, a small one (20 %) on the second,
read at random (64 KiB, a line at a time) at once through their NBD
exports. Shared, both fit; split, the large one does not fit its half.
Each layout is warmed the same way (each working set read once in order,
then the random load), then measured. Reported: each volume's and the
combined hit ratio and IOPS over the measured interval."""
import json
import os
import shutil
import subprocess
import tempfile
import threading

from bench_lib import MiB, Proc, cachectl, fio, uri, warm

LINE = 64 * 1024


def stats(build, env, name, volume=None):
    cmd = [f"{build}/cachectl/cachectl", "stats", name, "--json"] + (["--volume", volume] if volume else [])
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def hits(s):
    return int(s["read_hits"]), int(s["read_misses"])


def run_both(targets, sizes, seconds):
    """fio randread of 64 KiB at depth 16 on both targets at once; IOPS of each."""
    results = [None, None]

    def one(i):
        results[i] = fio(targets[i], "randread", "64k", 16, seconds, sizes[i], extra=["--randrepeat=0"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r["iops"] for r in results]


def volumes(bench, log):
    ssd_data = 32 * MiB if bench.smoke else 128 * MiB if bench.quick else 512 * MiB
    seconds = 2 if bench.smoke else 10 if bench.quick else 30
    big, small = ssd_data * 7 // 10 // LINE * LINE, ssd_data * 2 // 10 // LINE * LINE
    log(f"== volumes: two volumes ({big // MiB} and {small // MiB} MiB working sets) on a {ssd_data // MiB} MiB "
        "SSD, shared and split")
    w = tempfile.mkdtemp(prefix="volumes-", dir=bench.w)
    env = dict(os.environ, CACHECTL_RUN_DIR=f"{w}/run", CACHECTL_STATE_DIR=f"{w}/state")
    procs, attached = [], []
    disks = []
    try:
        for d in ("a", "b"):
            path, sock = f"{w}/{d}.img", f"{w}/{d}.sock"
            with open(path, "wb") as f:
                f.truncate(4 * big)
            procs.append(Proc([f"{bench.args.build}/scripts/bench/cachectl-hdd-emu", "--file", path, "--socket", sock],
                              sock))
            disks.append(uri(sock))
        header = 2 * MiB  # superblock, map, and room to spare ahead of the lines
        for name, size in (("shared.img", ssd_data), ("half1.img", ssd_data // 2), ("half2.img", ssd_data // 2)):
            with open(f"{w}/{name}", "wb") as f:
                f.truncate(size + header)
        out = {"ssd_bytes": ssd_data, "working_sets": [big, small], "seconds": seconds}
        sizes = [big, small]

        def measure(label, targets, read_stats):
            for target, size in zip(targets, sizes):
                warm(target, size)
            run_both(targets, sizes, seconds)  # then the steady state of this load
            before = read_stats()
            iops = run_both(targets, sizes, seconds)
            after = read_stats()
            per = []
            for i in range(2):
                h = after[i][0] - before[i][0]
                m = after[i][1] - before[i][1]
                per.append({"iops": iops[i], "hit_ratio": round(h / max(h + m, 1), 4)})
            h = sum(after[i][0] - before[i][0] for i in range(2))
            m = sum(after[i][1] - before[i][1] for i in range(2))
            out[label] = {"volumes": per, "iops": round(sum(iops), 1), "slowest_iops": round(min(iops), 1),
                          "hit_ratio": round(h / max(h + m, 1), 4)}
            log(f"  {label}: {out[label]}")

        common = ["--mode", "writethrough", "--line-size", "64K", "--frontend", "socket"]
        build = bench.args.build
        cachectl(build, env, "attach", "--origin", disks[0], "--cache", f"{w}/shared.img", "--name", "shared", *common)
        attached.append("shared")
        cachectl(build, env, "set", "shared", "--seq-cutoff", "0")
        cachectl(build, env, "add", "shared", "--origin", disks[1], "--volume", "second")
        sock = f"{w}/run/shared/nbd"
        measure("shared", [uri(sock, "shared"), uri(sock, "second")],
                lambda: [hits(stats(build, env, "shared", v)) for v in ("shared", "second")])
        cachectl(build, env, "detach", "shared")
        attached.remove("shared")
        for name, disk, ssd in (("half1", disks[0], "half1.img"), ("half2", disks[1], "half2.img")):
            cachectl(build, env, "attach", "--origin", disk, "--cache", f"{w}/{ssd}", "--name", name, *common)
            attached.append(name)
            cachectl(build, env, "set", name, "--seq-cutoff", "0")
        measure("split", [uri(f"{w}/run/half1/nbd", "half1"), uri(f"{w}/run/half2/nbd", "half2")],
                lambda: [hits(stats(build, env, n)) for n in ("half1", "half2")])
    finally:
        for name in attached:
            cachectl(bench.args.build, env, "detach", name)
        for p in procs:
            p.stop()
        shutil.rmtree(w, ignore_errors=True)
    bench.results["volumes"] = out


def report_lines(results):
    v = results.get("volumes")
    if not v:
        return []
    lines = ["### One SSD for two volumes: shared against split", "",
             f"Two volumes on emulated disks, read at random (64 KiB, depth 16 each, at once) over working sets of "
             f"{v['working_sets'][0] // MiB} and {v['working_sets'][1] // MiB} MiB; an SSD of {v['ssd_bytes'] // MiB} "
             f"MiB of lines, either one cache serving both (`cachectl add`) or two caches on its two halves. "
             f"Each working set read once in order, then {v['seconds']} s of the load, then {v['seconds']} s "
             "measured.", "",
             "| layout | volume 1 hit ratio | volume 2 hit ratio | combined hit ratio | volume 1 IOPS | "
             "volume 2 IOPS | combined IOPS | slowest volume IOPS |", "|---|---|---|---|---|---|---|---|"]
    for label in ("shared", "split"):
        r = v[label]
        lines.append(f"| {label} | {r['volumes'][0]['hit_ratio']:.3f} | {r['volumes'][1]['hit_ratio']:.3f} | "
                     f"{r['hit_ratio']:.3f} | {r['volumes'][0]['iops']:.0f} | {r['volumes'][1]['iops']:.0f} | "
                     f"{r['iops']:.0f} | {r['slowest_iops']:.0f} |")
    s, p = v["shared"], v["split"]
    lines += ["", f"Shared against split: hit ratio {s['hit_ratio']:.3f} against {p['hit_ratio']:.3f}; the slowest "
              f"volume {s['slowest_iops'] / max(p['slowest_iops'], 1):.2f}x as fast; all I/O together "
              f"{s['iops'] / max(p['iops'], 1):.2f}x.", ""]
    return lines
