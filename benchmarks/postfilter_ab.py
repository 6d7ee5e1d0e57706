"""The GPU post-filter (kernels/postfilter.cu) in its two forms, one launch (post_kernel, the default) and two
(count, then fill), and against other revisions of the two-launch form, side by side on one recorded search's
leaves (GPU): all return the same ads; each is timed as a CUDA graph of its launches, in interleaved rounds, and
inside the whole graphed search with post-filter.

    python benchmarks/postfilter_ab.py --index IDX [--old scratch/old_postfilter.cu ...]

The other revisions must take the count and fill kernels' current arguments (since session 11 the leaves'
dtype flag, leaves64, follows the leaves)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gtmkit.matcher.cuda.backend as bc  # noqa: E402
from gtmkit.matcher.cuda.graph import GraphedBeamSearch  # noqa: E402
from step_gpu import cuda_time, recorded_search  # noqa: E402


def kernels(path: Path):
    mod = bc.load_module(path)
    return mod.get_function("post_count_kernel"), mod.get_function("post_fill_kernel")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", required=True)
    ap.add_argument("--old", action="append", default=[], help="another postfilter.cu (repeatable)")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    r = recorded_search(args.index, args.requests)
    m, res, q, sizes, recorded = r["m"], r["res"], r["q"], r["sizes"], r["recorded"]
    be = m.cuda
    leaves = cp.asarray(res.leaf_nodes, cp.int64)
    variants = {"single": (be.k_post_count, be.k_post_fill, True), "two": (be.k_post_count, be.k_post_fill, False)}
    for path in args.old:
        variants[Path(path).stem] = kernels(Path(path)) + (False,)
    timed, outs = {}, {}
    for name, (kc, kf, single) in variants.items():
        be.k_post_count, be.k_post_fill, be.post_single = kc, kf, single
        outs[name] = [cp.asnumpy(a) for a in be.postfilter_padded(leaves, q, True)]
        stream, scratch = cp.cuda.Stream(non_blocking=True), {}
        with stream:
            out = be.postfilter_padded(leaves, q, True, scratch=scratch)
            stream.synchronize()
            stream.begin_capture()
            be.postfilter_padded(leaves, q, True, out=out, scratch=scratch)
            graph = stream.end_capture()
        whole = GraphedBeamSearch(m, q, lambda step, prev, parents: recorded[step], sizes, gtm=True, postfilter=True)
        timed[name] = (graph, stream, whole, [], [])
    n_new = outs["single"][2]
    same = all(np.array_equal(n_new, o[2]) and all(
        np.array_equal(a[b, :n], c[b, :n]) for a, c in zip(outs["single"][:2], o[:2]) for b, n in enumerate(n_new))
        for o in outs.values())
    print(f"eligible ads per request: {n_new.tolist()}; outputs equal: {same}")
    for _ in range(args.rounds):
        for graph, stream, whole, alone, full in timed.values():
            alone.append(cuda_time(lambda: graph.launch(stream), reps=20, stream=stream))
            full.append(cuda_time(whole.launch, reps=20, stream=whole.stream))
    print("variant | post-filter graph us | whole graphed search + post-filter us")
    for name, (_, _, _, alone, full) in timed.items():
        print(f"{name} | {1e3 * np.median(alone):.1f} | {1e3 * np.median(full):.1f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
