"""Shared by the benchmark scripts: the machine description and a CPU-load watch."""

from __future__ import annotations

import os
import platform
import time


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
    """Cores busy with our process vs other work (and hypervisor steal) over a phase, from /proc/stat:
    on a 2-core machine shared with other jobs, a 2-thread numba kernel suffers more from one busy core
    than the single-threaded numpy baselines do, so each phase records how loaded the machine was."""

    def __init__(self):
        self.tick = os.sysconf("SC_CLK_TCK")
        self.t0, self.s0, self.p0 = time.perf_counter(), self._stat(), self._ours()

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
        return t.user + t.system

    def stop(self) -> dict:
        wall, s1, p1 = time.perf_counter() - self.t0, self._stat(), self._ours()
        ours = (p1 - self.p0) / wall
        if s1 is None or self.s0 is None:
            return {"ours_cores": round(ours, 2)}
        busy = (s1[0] - self.s0[0]) / self.tick / wall
        return {"ours_cores": round(ours, 2), "other_cores": round(max(busy - ours, 0.0), 2),
                "steal_cores": round((s1[1] - self.s0[1]) / self.tick / wall, 2)}
