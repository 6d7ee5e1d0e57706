"""The multi-kernel step (kernels/gtm_step.cu, the path for GPUs without thread block clusters) with GTM over
the requests' sparse images (SPT=1, the default) against their full rows (SPT=0), on one recorded search (B=16, beams 1, 512, 1024, 1024:
step_gpu.py's inputs). Every variant must return the same outputs (step with and without the full count, and
the token mask) at every step; then each step alone as a CUDA graph, timed in interleaved rounds (every variant
sees the same machine state): median per depth and the ratio to the first variant.

    python benchmarks/gpu_multi_ab.py --index IDX [--rounds N]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# name -> gtm_step.cu defines; the first is the base
VARIANTS = {"SPT=1": ("SPT=1",), "SPT=0": ("SPT=0",)}


def outputs(be, steps, q):
    """Every step's outputs, as NumPy arrays: the step with and without the full count, and the mask."""
    import cupy as cp
    out = []
    for s in steps:
        args = (s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"], s["req_rows"], q, s["k"], True)
        got = [*be.step(*args, False, s["max_children"]), *be.step(*args, True, s["max_children"]),
               be.mask(s["node_ids"], s["row_req"], q, True)]
        out.append([cp.asnumpy(a) for a in got])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import numpy as np  # after the arguments: --help works without CuPy
    from step_gpu import capture_step, cuda_time, recorded_search

    r = recorded_search(args.index, args.requests)
    m, steps, q, B = r["m"], r["steps"], r["q"], r["B"]
    be = m.cuda
    be.fused = False  # the multi-kernel step on any GPU
    graphs, ref = {}, None
    for name, defines in VARIANTS.items():
        be.use_step(defines)
        outs = outputs(be, steps, q)
        ref = ref or outs
        for t, (o, w) in enumerate(zip(outs, ref)):
            assert all(np.array_equal(a, b) for a, b in zip(o, w)), f"{name}: step {t + 1} differs from the base"
        graphs[name] = [capture_step(be, s, q, B) for s in steps]  # each graph keeps this variant's kernels
    print(f"outputs equal at every step ({len(steps)}) for {', '.join(VARIANTS)}", flush=True)
    times = {name: [[] for _ in steps] for name in VARIANTS}
    for _ in range(args.rounds):
        for name, gs in graphs.items():
            for i, (g, st) in enumerate(gs):
                times[name][i].append(cuda_time(lambda: g.launch(st), reps=20, stream=st))
    med = [[1e3 * float(np.median(x)) for x in ts] for ts in times.values()]  # [variant][step] us
    names = list(VARIANTS)
    print(f"\nstep | rows | k | {' | '.join(n + ' us' for n in names)} | "
          f"{' | '.join(f'{n} / {names[0]}' for n in names[1:])}")
    rows = [(i + 1, int(s["node_ids"].shape[0]), s["k"], [v[i] for v in med]) for i, s in enumerate(steps)]
    for step, R, k, us in rows + [("all", "", "", [sum(v) for v in med])]:
        print(f"{step} | {R} | {k} | {' | '.join(f'{x:.1f}' for x in us)} | "
              f"{' | '.join(f'{x / us[0]:.3f}' for x in us[1:])}")


if __name__ == "__main__":
    main()
