"""Shared by the benchmark scripts: the machine description, the result files' names and a CPU-load watch."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


HOST_HELP = "host kind in the result file names (default: the GPU's model when one is used, e.g. h200, else cpuN)"


def host_kind(gpu: str = "") -> str:
    """The host kind a result file is named after: the GPU model's short name ("NVIDIA H200" -> "h200") when
    the run used one, else "cpu" and the cores this process may run on ("cpu2")."""
    for word in re.split(r"[\s\-_]+", gpu):
        if re.search(r"\d", word):
            return re.sub(r"\W", "", word).lower()
    return f"cpu{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}"


def gpu_name():
    """The current CUDA device's name; None without CuPy or a device."""
    try:
        import cupy
        name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
        return name.decode() if isinstance(name, bytes) else name
    except Exception:  # no CuPy or no device
        return None


def result_paths(out, benchmark: str, host: str = None, gpu: str = "") -> tuple:
    """-> (out/<benchmark>_<host>.json, .md): the one pair of result files of a benchmark on a host kind, which each
    run overwrites (the run's date is inside)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{benchmark}_{host or host_kind(gpu)}"
    return stem.with_suffix(".json"), stem.with_suffix(".md")


def child(code: str, *args) -> dict:
    """Run python -c code in a fresh process (its own peak RSS) and parse the last line of its output as JSON."""
    # the repo first, then whatever the caller had on its path (e.g. wheels installed with --target)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"child failed (rc {r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def machine(**extra) -> dict:
    """CPU model, cores, memory and Python version of this machine (plus any extra fields)."""
    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem, 1), "python": platform.python_version(),
            **extra}


class CpuWatch:
    """Cores busy with this process (and its children) vs other work and hypervisor steal over a
    phase, from /proc/stat and os.times."""

    def __init__(self):
        self.tick = os.sysconf("SC_CLK_TCK")
        self.t0, self.s0, self.p0 = time.perf_counter(), self._stat(), self._ours()
        self.load0 = os.getloadavg()[0]

    @staticmethod
    def _stat():
        try:
            f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        except (OSError, ValueError):
            return None
        return f[0] + f[1] + f[2] + f[5] + f[6], (f[7] if len(f) > 7 else 0)  # busy, steal

    @staticmethod
    def _ours():
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def stop(self) -> dict:
        wall, s1, p1 = time.perf_counter() - self.t0, self._stat(), self._ours()
        ours = (p1 - self.p0) / wall
        d = {"wall_s": round(wall, 2), "ours_cores": round(ours, 2),
             "loadavg_1m": [round(self.load0, 2), round(os.getloadavg()[0], 2)]}
        if s1 is not None and self.s0 is not None:
            busy = (s1[0] - self.s0[0]) / self.tick / wall
            d["other_cores"] = round(max(busy - ours, 0.0), 2)
            d["steal_cores"] = round((s1[1] - self.s0[1]) / self.tick / wall, 2)
        return d


def busy_threads() -> int:
    """Threads of this process other than the caller that are running or runnable now ('R' in
    /proc/self/task/*/stat): e.g. OpenMP workers spinning after a parallel region. -1 without /proc."""
    import threading
    me = threading.get_native_id()
    n = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return -1
    for tid in tasks:
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:  # the thread ended
            continue
        n += state == "R"
    return n


def settle_workers(timeout: float = 0.2) -> float:
    """Wait, busy on this thread (a sleeping host makes the next GPU launch slower), until no other thread of
    this process runs: libgomp's workers spin for a while after each parallel region of the CPU search, on
    the cores the GPU search's host thread shares. Returns the seconds waited (timeout if they never stop)."""
    t0 = time.perf_counter()
    while busy_threads() > 0 and time.perf_counter() - t0 < timeout:
        pass
    return time.perf_counter() - t0
