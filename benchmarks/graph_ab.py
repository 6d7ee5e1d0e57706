"""Whole graphed beam searches side by side (Hopper GPU): GraphedBeamSearch options that change what the
graph launches, on one recorded search. Every variant must return the first one's exact result; then
they are timed in interleaved rounds (CUDA events on each graph's stream), with ratios to the first.

    python benchmarks/graph_ab.py --index IDX --variant fused: --variant reorder:fuse_history=0

A variant is NAME:OPTIONS, options comma-separated KEY=0|1 for GraphedBeamSearch's keyword arguments
(fuse_history, postfilter, pdl)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gtmkit.matcher.cuda.graph import GraphedBeamSearch  # noqa: E402
from step_gpu import cuda_time, variant_run  # noqa: E402


def parse(spec: str):
    name, _, opts = spec.partition(":")
    kw = dict(gtm=True, postfilter=True, pdl=False)
    for tok in filter(None, opts.split(",")):
        key, _, value = tok.partition("=")
        kw[key] = bool(int(value))
    return name, kw


def main():
    args, r = variant_run(7, __doc__)
    recorded = r["recorded"]

    def replayed(step, prev, parents):
        return recorded[step]

    graphs, first = [], None
    for spec in args.variant:
        name, kw = parse(spec)
        g = GraphedBeamSearch(r["m"], r["q"], replayed, r["sizes"], **kw)
        res = g.replay()
        got = [cp.asnumpy(x) for x in res]
        if first is None:
            first = got
        # sids, scores, leaves; with the post-filter also the ad counts and each request's ads (past its
        # count the padded output is unspecified)
        same = all(a.shape == b.shape and bool((a == b).all()) for a, b in zip(first[:3], got[:3]))
        if kw["postfilter"]:
            same = same and bool((first[5] == got[5]).all()) and all(
                bool((first[3][b, :n] == got[3][b, :n]).all()) for b, n in enumerate(got[5]))
        print(f"{name}: {kw}: result equals the first variant's: {same}", flush=True)
        graphs.append((name, g))
    times = {name: [] for name, _ in graphs}
    for _ in range(args.rounds):
        for name, g in graphs:
            times[name].append(cuda_time(g.launch, reps=30, stream=g.stream) * 1000)
    base = statistics.median(times[graphs[0][0]])
    print("\nvariant | whole graph us (median of rounds) | ratio to first")
    for name, _ in graphs:
        t = statistics.median(times[name])
        print(f"{name} | {t:.1f} | {base / t:.3f}")


if __name__ == "__main__":
    main()
