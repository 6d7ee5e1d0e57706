"""Where a fused step's whole-GPU front (kernels/gtm_front.cuh) spends its time (Hopper GPU): on one recorded
search, each step captured as CUDA graphs of the front's first 1, 2 and 3 kernels, the whole step with the front
and the step without it; the differences are each kernel's share.

    python benchmarks/gpu_front_times.py --index IDX [--define FRONT_AGG=0 ...]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gtmkit  # noqa: E402
import gtmkit.matcher.backend_cuda as bc  # noqa: E402
from gtmkit.matcher.kernel_params import fused_scratch_slots  # noqa: E402
from gtmkit.synth import synth_users  # noqa: E402
from step_gpu import capture_step, cuda_time, record_inputs  # noqa: E402


def capture_front(be, s, q, B, kernels):
    """-> (graph, stream) of the front's first `kernels` launches on step s's inputs."""
    R, D = int(s["node_ids"].shape[0]), int(s["max_children"])
    cap = fused_scratch_slots(R, B, D, be.fused_cluster)
    cand, child, scratch = cp.empty(cap, cp.uint64), cp.empty(cap, cp.int32), {}
    stream = cp.cuda.Stream(non_blocking=True)

    def run():
        be._front(s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], B, s["k"], True, False, D, cand,
                  child, scratch, kernels)
    with stream:
        run()
        stream.synchronize()
        stream.begin_capture()
        run()
        graph = stream.end_capture()
    return graph, stream


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", required=True)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--define", action="append", default=[])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    idx = gtmkit.load_index(args.index, verify=False)
    users = synth_users(idx.manifest["schema"], args.requests, seed=11)
    m = gtmkit.Matcher(idx, "cuda")
    sizes = (1, 512, 1024, 1024)
    steps, _, q, B = record_inputs(m, [idx.encode_request(u) for u in users], users, sizes)
    be = m.cuda
    if args.define:
        mod = bc.load_module(bc.FUSED_FILE, tuple(args.define))
        be.k_fused = mod.get_function("fused_step_kernel")
        be.k_fused.max_dynamic_shared_size_bytes = bc.FUSED_SMEM
        be.k_front = [mod.get_function(n) for n in ("front_info_kernel", "front_hist_kernel", "front_collect_kernel")]
    print(f"defines {args.define}; graphs, median us over {args.reps} replays")
    print("step | F0 | F0+F1 | F0+F1+F2 | step with front | step without | F1 | F2 | cluster kernel after the front")
    for i, s in enumerate(steps):
        t = []
        for kernels in (1, 2, 3):
            g, st = capture_front(be, s, q, B, kernels)
            t.append(1e3 * cuda_time(lambda: g.launch(st), reps=args.reps, stream=st))
        for mode in ("1", "0"):
            be.front_mode = mode
            g, st = capture_step(be, s, q, B)
            t.append(1e3 * cuda_time(lambda: g.launch(st), reps=args.reps, stream=st))
        print(f"{i + 1} | " + " | ".join(f"{x:.1f}" for x in t) +
              f" | {t[1] - t[0]:.1f} | {t[2] - t[1]:.1f} | {t[3] - t[2]:.1f}", flush=True)
        be.front_mode = "auto"


if __name__ == "__main__":
    main()
