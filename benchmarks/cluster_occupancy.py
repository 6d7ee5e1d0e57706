"""How many clusters of the fused step fit on this GPU at once (cuOccupancyMaxActiveClusters), for cluster sizes
2-8 of 1024-thread blocks: the bound on any design that gives a request more SMs or runs helper
clusters beside the 16 requests' (step_gpu_profile.md). Prints JSON lines.

    python benchmarks/cluster_occupancy.py"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gtmkit.matcher.cuda.backend as bc  # noqa: E402
from gtmkit.matcher.cuda.pdl import _Config, _function_ptr  # noqa: E402


def max_clusters(fn, cl: int, nt: int, smem: int) -> int:
    occ = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveClusters
    occ.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(_Config)]
    cfg = _Config((ctypes.c_uint * 3)(cl * 16, 1, 1), (ctypes.c_uint * 3)(nt, 1, 1), smem, None, None, 0)
    n = ctypes.c_int(0)
    rc = occ(ctypes.byref(n), ctypes.c_void_p(_function_ptr(fn)), ctypes.byref(cfg))
    if rc:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters: CUresult {rc}")
    return n.value


def main():
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    for cl in range(2, 9):
        fn = bc.load_module(bc.FUSED_FILE, (f"CL={cl}",)).get_function("fused_step_kernel")
        fn.max_dynamic_shared_size_bytes = bc.FUSED_SMEM
        n = max_clusters(fn, cl, bc.FUSED_THREADS, bc.FUSED_SMEM)
        print(json.dumps({"gpu_sms": sms, "cluster": cl, "threads": bc.FUSED_THREADS, "max_active_clusters": n,
                          "sms_held": n * cl}), flush=True)


if __name__ == "__main__":
    main()
