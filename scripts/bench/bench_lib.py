"""What every benchmark section uses: servers started and stopped by process
id, fio through its nbd engine, the cachectl command line."""
import json
import os
import signal
import subprocess
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


def fio_json(cmd):
    """Runs fio with JSON output; returns the (group-reported) job."""
    out = subprocess.run(cmd + ["--output-format=json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{"):])["jobs"][0]


def summarize(job):
    """IOPS, MB/s, mean and 99th-percentile completion latency (ms) of a job,
    the latency of its busier direction."""
    total_iops = job["read"]["iops"] + job["write"]["iops"]
    total_bw = (job["read"]["bw_bytes"] + job["write"]["bw_bytes"]) / 1e6
    side = job["read"] if job["read"]["iops"] >= job["write"]["iops"] else job["write"]
    lat = side["clat_ns"]
    p99 = lat.get("percentile", {}).get("99.000000", 0) / 1e6
    return {"iops": round(total_iops, 1), "mb_s": round(total_bw, 2),
            "lat_mean_ms": round(lat["mean"] / 1e6, 3), "lat_p99_ms": round(p99, 3)}


def fio(target, rw, bs, depth, seconds, size, extra=()):
    """One fio job through its nbd engine."""
    cmd = ["fio", "--name=b", "--ioengine=nbd", f"--uri={target}", f"--rw={rw}", f"--bs={bs}",
           f"--iodepth={depth}", f"--runtime={seconds}", "--time_based", f"--size={size}",
           "--randrepeat=1", "--group_reporting", *extra]
    return summarize(fio_json(cmd))


def fio_direct(path, rw, bs, depth, seconds):
    """fio on a file with io_uring and O_DIRECT: what the device itself does."""
    cmd = ["fio", "--name=b", "--ioengine=io_uring", "--direct=1", f"--filename={path}", f"--rw={rw}",
           f"--bs={bs}", f"--iodepth={depth}", f"--runtime={seconds}", "--time_based"]
    return summarize(fio_json(cmd))


def warm(target, size):
    """Reads the working set once, in order and one request at a time (on the
    emulated disk, interleaved streams would each pay a seek)."""
    subprocess.run(["fio", "--name=warm", "--ioengine=nbd", f"--uri={target}", "--rw=read",
                    "--bs=1M", "--iodepth=1", f"--size={size}"], check=True, capture_output=True)


def cachectl(build, env, *args):
    subprocess.run([f"{build}/cachectl/cachectl", *args], env=env, check=True,
                   stdout=subprocess.DEVNULL)
