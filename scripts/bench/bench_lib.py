"""What every benchmark section uses: servers started and stopped by process
id, fio through its nbd engine, the cachectl command line, and the CPU every
fio run costs (fio itself and the server it talks to)."""
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

MiB = 1 << 20
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
fio_startup_cpu = 0.0  # seconds of CPU fio spends starting and stopping (calibrate_fio)


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

    @property
    def pid(self):
        return self.p.pid

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            self.p.wait(timeout=30)


def uri(socket, export=""):
    return f"nbd+unix:///{export}?socket={socket}"


def cpu_seconds(pid):
    """A process's CPU time so far, user and system, every thread counted
    (those that have exited too): utime + stime of /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()  # from field 3 (state) on; the name may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14 and 15


def thread_count(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


class Servers:
    """The CPU time and the most threads of the server processes behind one fio
    run. `servers` maps a role ("daemon": the server under test; "disk": the
    emulated disk behind it) to a process id, or None where there is none.
    Threads are sampled from /proc/PID/status every 50 ms while fio runs."""

    def __init__(self, servers):
        self.pids = {role: pid for role, pid in servers.items() if pid}
        self.threads = {role: 0 for role in self.pids}
        self.stopped = threading.Event()

    def sample(self):
        for role, pid in self.pids.items():
            try:
                self.threads[role] = max(self.threads[role], thread_count(pid))
            except OSError:
                pass

    def __enter__(self):
        self.cpu = {role: cpu_seconds(pid) for role, pid in self.pids.items()}
        self.sample()
        self.sampler = threading.Thread(target=self.run, daemon=True)
        self.sampler.start()
        return self

    def run(self):
        while not self.stopped.wait(0.05):
            self.sample()

    def __exit__(self, *_):
        self.stopped.set()
        self.sampler.join()
        self.sample()
        self.cpu = {role: cpu_seconds(pid) - self.cpu[role] for role, pid in self.pids.items()}


def fio_json(cmd, servers=None):
    """Runs fio with JSON output; returns the (group-reported) job and the CPU
    of the run: fio's own (user and system time of fio and the job processes
    it forks, from wait4), and that of each server in `servers` (see Servers)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, Servers(servers or {}) as watched:
        p = subprocess.Popen(cmd + ["--output-format=json"], stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
        if p.returncode != 0:
            err.seek(0)
            raise subprocess.CalledProcessError(p.returncode, cmd, text, err.read().decode())
    job = json.loads(text[text.index("{"):])["jobs"][0]
    cpu = {"client": usage.ru_utime + usage.ru_stime, **watched.cpu}
    return job, cpu, watched.threads


def calibrate_fio():
    """fio's CPU to start and stop, whatever it then does (about 0.16 s here:
    its clock calibration, set-up, the report): the least of three runs of
    its null engine on 4 KiB. Taken off fio's CPU at every point, so that a
    point's client figure is per I/O, not per fio run."""
    global fio_startup_cpu
    fio_startup_cpu = min(fio_json(["fio", "--name=startup", "--ioengine=null", "--size=4k"])[1]["client"]
                          for _ in range(3))
    return fio_startup_cpu


def summarize(job, cpu=None, threads=None):
    """IOPS, MB/s, mean and 99th-percentile completion latency (ms) of a job,
    the latency of its busier direction; and, with the run's CPU (fio_json),
    microseconds of CPU per I/O completed: fio's (client; its start-up taken
    off, see calibrate_fio), the server's (daemon; None where fio works
    alone), their sum, the emulated disk's apart (it stands for hardware),
    and the server's most threads. Kept as cross-checks: fio's whole CPU
    (fio_process) and fio's own account of its jobs (fio_job)."""
    total_iops = job["read"]["iops"] + job["write"]["iops"]
    total_bw = (job["read"]["bw_bytes"] + job["write"]["bw_bytes"]) / 1e6
    side = job["read"] if job["read"]["iops"] >= job["write"]["iops"] else job["write"]
    lat = side["clat_ns"]
    p99 = lat.get("percentile", {}).get("99.000000", 0) / 1e6
    r = {"iops": round(total_iops, 1), "mb_s": round(total_bw, 2),
         "lat_mean_ms": round(lat["mean"] / 1e6, 3), "lat_p99_ms": round(p99, 3)}
    for direction in ("read", "write"):  # each direction's own, where it did I/O
        if job[direction]["iops"] > 0:
            pct = job[direction]["clat_ns"].get("percentile", {})
            r[f"{direction}_p99_ms"] = round(pct.get("99.000000", 0) / 1e6, 3)
    if cpu is not None:
        ios = sum(job[d]["total_ios"] for d in ("read", "write", "trim") if d in job)
        per_io = lambda s: round(s * 1e6 / ios, 2) if ios and s is not None else None
        # fio's own account of its job processes' CPU (usr_cpu, sys_cpu: % of the job's runtime)
        fio_job = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000
        client = max(0.0, cpu["client"] - fio_startup_cpu)
        r.update({"ios": ios, "client_cpu_us_per_io": per_io(client),
                  "fio_process_cpu_us_per_io": per_io(cpu["client"]), "fio_job_cpu_us_per_io": per_io(fio_job),
                  "daemon_cpu_us_per_io": per_io(cpu.get("daemon")),
                  "disk_cpu_us_per_io": per_io(cpu.get("disk")),
                  "cpu_us_per_io": per_io(client + cpu.get("daemon", 0)),
                  "daemon_threads": (threads or {}).get("daemon")})
    return r


def fio(target, rw, bs, depth, seconds, size, extra=(), servers=None):
    """One fio job through its nbd engine; `servers` as in Servers."""
    cmd = ["fio", "--name=b", "--ioengine=nbd", f"--uri={target}", f"--rw={rw}", f"--bs={bs}",
           f"--iodepth={depth}", f"--runtime={seconds}", "--time_based", f"--size={size}",
           "--randrepeat=1", "--group_reporting", *extra]
    return summarize(*fio_json(cmd, servers))


def fio_direct(path, rw, bs, depth, seconds):
    """fio on a file with io_uring and O_DIRECT: what the device itself does."""
    cmd = ["fio", "--name=b", "--ioengine=io_uring", "--direct=1", f"--filename={path}", f"--rw={rw}",
           f"--bs={bs}", f"--iodepth={depth}", f"--runtime={seconds}", "--time_based"]
    return summarize(*fio_json(cmd))


def warm(target, size):
    """Reads the working set once, in order and one request at a time (on the
    emulated disk, interleaved streams would each pay a seek)."""
    subprocess.run(["fio", "--name=warm", "--ioengine=nbd", f"--uri={target}", "--rw=read",
                    "--bs=1M", "--iodepth=1", f"--size={size}"], check=True, capture_output=True)


def cachectl(build, env, *args):
    subprocess.run([f"{build}/cachectl/cachectl", *args], env=env, check=True,
                   stdout=subprocess.DEVNULL)
