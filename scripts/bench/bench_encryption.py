"""The encryption section of bench.py: the seed profiles through two caches
alike but for encryption at rest (attach --encrypt --key-file), side by side
in one run, as the Synology review measures encrypted shared folders. Both
caches sit on sparse files (their page cache standing in for a fast SSD), in
write-back, their working sets warm, so what differs is AES-256-XTS on every
block written to and read from the cache device. Each cache is flushed
before each measurement, so that no profile pays for the cleaning of the
one before. Reported per profile: IOPS
of each, their ratio, and the daemon's CPU per I/O of each (and the
difference: what encryption costs a request)."""
import os
import shutil
import subprocess
import tempfile

from bench_lib import MiB, cachectl, fio, uri, warm

PROFILES = (("4k-randread", "randread", "4k", ()), ("4k-randwrite", "randwrite", "4k", ()),
            ("64k-seqread", "read", "64k", ()), ("64k-seqwrite", "write", "64k", ()),
            ("sql-8k-70r30w", "randrw", "8k", ("--rwmixread=70",)))


def daemon_pid(w, name):
    with open(f"{w}/run/{name}/pid") as f:
        return int(f.read())


def encryption(bench, log):
    size = 16 * MiB if bench.smoke else 256 * MiB if bench.quick else 1024 * MiB
    seconds = 2 if bench.smoke else 10 if bench.quick else 30
    log(f"== encryption: the seed profiles on a {size // MiB} MiB working set, encrypted and not")
    w = tempfile.mkdtemp(prefix="encryption-", dir=bench.w)
    env = dict(os.environ, CACHECTL_RUN_DIR=f"{w}/run", CACHECTL_STATE_DIR=f"{w}/state")
    key = f"{w}/key"
    with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
        f.write(os.urandom(64))
    caches = {"plain": [], "encrypted": ["--encrypt", "--key-file", key]}
    attached, out = [], {}
    try:
        for name, extra in caches.items():
            for path, length in ((f"{w}/{name}.origin", size), (f"{w}/{name}.ssd", size + 64 * MiB)):
                with open(path, "wb") as f:
                    f.truncate(length)
            cachectl(bench.args.build, env, "attach", "--origin", f"{w}/{name}.origin", "--cache", f"{w}/{name}.ssd",
                     "--name", name, "--frontend", "socket", "--mode", "writeback", *extra)
            attached.append(name)
            cachectl(bench.args.build, env, "set", name, "--seq-cutoff", "0")
            target = uri(f"{w}/run/{name}/nbd", name)
            subprocess.run(["fio", "--name=fill", "--ioengine=nbd", f"--uri={target}", "--rw=write", "--bs=1m",
                            f"--size={size}", "--output=/dev/null"], check=True, capture_output=True)
            warm(target, size)
        for profile, rw, bs, extra in PROFILES:
            row = {}
            for name in caches:  # one after the other, each on the same warm working set
                # Nothing dirty: the cleaner's work (reading lines back,
                # decrypting them) is not counted against the next profile.
                cachectl(bench.args.build, env, "flush", name)
                target = uri(f"{w}/run/{name}/nbd", name)
                r = fio(target, rw, bs, 16, seconds, size, extra, {"daemon": daemon_pid(w, name)})
                row[name] = {"iops": r["iops"], "daemon_cpu_us_per_io": r["daemon_cpu_us_per_io"]}
            row["ratio"] = round(row["encrypted"]["iops"] / row["plain"]["iops"], 3) if row["plain"]["iops"] else None
            out[profile] = row
            log(f"  {profile}: {row}")
    finally:
        for name in attached:
            cachectl(bench.args.build, env, "detach", name)
        shutil.rmtree(w, ignore_errors=True)
    bench.results["encryption"] = {"bytes": size, "seconds": seconds, "profiles": out}


def report_lines(results):
    e = results.get("encryption")
    if not e:
        return []
    lines = ["### Encryption at rest", "",
             f"The seed profiles at depth 16 for {e['seconds']} s each through two caches in write-back, "
             f"{e['bytes'] // MiB} MiB working sets warm, alike but for `attach --encrypt` (AES-256-XTS); "
             "daemon CPU in microseconds per I/O.", "",
             "| profile | plain IOPS | encrypted IOPS | encrypted / plain | plain CPU us/IO | encrypted CPU us/IO | "
             "cost us/IO |", "|---|---|---|---|---|---|---|"]
    for profile, row in e["profiles"].items():
        p, c = row["plain"], row["encrypted"]
        cost = (c["daemon_cpu_us_per_io"] or 0) - (p["daemon_cpu_us_per_io"] or 0)
        lines.append(f"| {profile} | {p['iops']:.0f} | {c['iops']:.0f} | {row['ratio']:.2f}x | "
                     f"{p['daemon_cpu_us_per_io']} | {c['daemon_cpu_us_per_io']} | {cost:+.1f} |")
    return lines + [""]
