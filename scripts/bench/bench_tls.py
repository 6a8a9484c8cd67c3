"""The tls section of bench.py: NBD over TLS (a pre-shared key, as
psktool makes it), side by side with the peer in one run. nbdcopy reads a
whole volume of random data (four connections, 64 requests each) from:
  cachectl TLS    a cachectl daemon, --nbd-tcp on loopback with --tls-psk,
                  its cache warm (the volume fits: every read a hit)
  cachectl unix   the same daemon on its unix socket (no TLS)
  nbdkit TLS      nbdkit's file plugin on the same file, --tls=require, the same key
  nbdkit TCP      nbdkit's file plugin on plain TCP
The best of three reads each, in MB/s. The volume is a file in the page
cache: what is measured is the protocol, the encryption and the server."""
import os
import shutil
import socket
import subprocess
import tempfile
import time

from bench_lib import MiB, Proc, cachectl


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def best_read_seconds(uri, runs=3):
    best = None
    for _ in range(runs):
        started = time.monotonic()
        subprocess.run(["nbdcopy", "--connections=4", "--requests=64", uri, "/dev/null"], check=True,
                       capture_output=True)
        took = time.monotonic() - started
        best = took if best is None else min(best, took)
    return best


def tls(bench, log):
    size = 16 * MiB if bench.smoke else 256 * MiB if bench.quick else 1024 * MiB
    log(f"== tls: reading {size // MiB} MiB through TLS")
    w = tempfile.mkdtemp(prefix="tls-", dir=bench.w)
    env = dict(os.environ, CACHECTL_RUN_DIR=f"{w}/run", CACHECTL_STATE_DIR=f"{w}/state")
    origin, ssd, key = f"{w}/origin.img", f"{w}/ssd.img", f"{w}/keys.psk"
    with open(origin, "wb") as f:
        for _ in range(size // MiB):
            f.write(os.urandom(MiB))
    with open(ssd, "wb") as f:
        f.truncate(size + 64 * MiB)
    old = os.umask(0o077)
    subprocess.run(["psktool", "-u", "bench", "-p", key], check=True, capture_output=True)
    os.umask(old)
    ours, peer, plain = free_port(), free_port(), free_port()
    procs = [Proc(["nbdkit", "--foreground", "-P", f"{w}/tls.pid", "-p", str(peer), "--tls=require",
                   f"--tls-psk={key}", "file", origin], f"{w}/tls.pid"),
             Proc(["nbdkit", "--foreground", "-P", f"{w}/tcp.pid", "-p", str(plain), "file", origin], f"{w}/tcp.pid")]
    attached = False
    try:
        cachectl(bench.args.build, env, "attach", "--origin", origin, "--cache", ssd, "--name", "tls",
                 "--frontend", "socket", "--nbd-tcp", f"127.0.0.1:{ours}", "--tls-psk", key)
        attached = True
        cachectl(bench.args.build, env, "set", "tls", "--seq-cutoff", "0")
        unix = f"nbd+unix:///tls?socket={w}/run/tls/nbd"
        subprocess.run(["nbdcopy", unix, "/dev/null"], check=True, capture_output=True)  # warm: every line cached
        psk = f"?tls-psk-file={key}"
        seconds = {"cachectl_tls": best_read_seconds(f"nbds://bench@127.0.0.1:{ours}/tls{psk}"),
                   "cachectl_unix": best_read_seconds(unix),
                   "nbdkit_tls": best_read_seconds(f"nbds://bench@127.0.0.1:{peer}/{psk}"),
                   "nbdkit_tcp": best_read_seconds(f"nbd://127.0.0.1:{plain}/")}
    finally:
        if attached:
            cachectl(bench.args.build, env, "detach", "tls")
        for p in procs:
            p.stop()
        shutil.rmtree(w, ignore_errors=True)
    out = {"bytes": size, **{f"{k}_mb_s": round(size / s / 1e6, 1) for k, s in seconds.items()}}
    bench.results["tls"] = out
    log(f"  {out}")


def report_lines(results):
    t = results.get("tls")
    if not t:
        return []
    return ["### NBD over TLS", "",
            f"nbdcopy reading {t['bytes'] // MiB} MiB of random data (4 connections, 64 requests each), best of "
            "three, MB/s; TLS with a pre-shared key (psktool's) on loopback.", "",
            "| cachectl TLS (warm) | cachectl unix socket | nbdkit file TLS | nbdkit file TCP | "
            "cachectl TLS / nbdkit TLS |", "|---|---|---|---|---|",
            f"| {t['cachectl_tls_mb_s']:.0f} | {t['cachectl_unix_mb_s']:.0f} | {t['nbdkit_tls_mb_s']:.0f} | "
            f"{t['nbdkit_tcp_mb_s']:.0f} | {t['cachectl_tls_mb_s'] / t['nbdkit_tls_mb_s']:.2f}x |", ""]
