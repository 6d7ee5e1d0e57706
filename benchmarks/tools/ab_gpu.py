"""A/B of GPU kernel builds on the same inputs, in one process: the CD+GTM step or the trie search built with
other defines, from another revision or from a loose .cu file. Every build must return the first one's exact
outputs; then the builds are timed in interleaved rounds (each sees the same machine state), with ratios to
the first (ratio > 1: faster than the first).

    python benchmarks/tools/ab_gpu.py step --index IDX --variant base --variant old@HEAD~1
    python benchmarks/tools/ab_gpu.py step --index IDX --multi --variant base --variant x:NAME=1
    python benchmarks/tools/ab_gpu.py trie --keys 10000000 --variant base --variant old@main

A variant is NAME[@SRC][:DEF=V,...] (SRC: a git revision or a .cu file; tools/_kernels.py). A CL (and for the
step NT) define also sets the launch.
- step: the fused step (gtm_fused.cu, sm_90+) or with --multi the multi-kernel step (gtm_step.cu), on one
  recorded search (step_gpu.py's: B=16, beams 1,512,1024,1024): every step's outputs and the graphed search's
  answer compared; each step alone as a CUDA graph and the whole graphed search with post-filter timed (CUDA
  events, median of rounds). The index: `gtmkit build` of a synth catalog, as in benchmarks/README.md.
- trie: the search kernel (trie_search.cu) on --keys synth keys, b=1, BW=K, T steps: every query's results
  compared; wall time per query (host call + synchronize), the builds taking turns in blocks of --block
  queries in a rotating order.
Exit status 1 when a build's outputs differ from the first's."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent))

from _kernels import Variant, build, use_fused, use_multi  # noqa: E402


def step_ab(a) -> int:
    from step_gpu import capture_step, cuda_time, need_cuda, recorded_search
    need_cuda()
    import cupy as cp
    import numpy as np

    from gtmkit.matcher.cuda.graph import GraphedBeamSearch
    r = recorded_search(a.index, a.requests)
    m, steps, q, B = r["m"], r["steps"], r["q"], r["B"]
    be = m.cuda
    if a.multi:
        be.fused = False
    elif not be.fused:
        raise SystemExit("this GPU runs the multi-kernel step (no thread block clusters): pass --multi")
    ref, ref_whole, timed, bad = None, None, [], 0
    for spec in a.variant:
        v = Variant.parse(spec)
        (use_multi if a.multi else use_fused)(be, v)
        outs = [[cp.asnumpy(x) for x in be.step(s["node_ids"], s["logprobs"], 0, s["beam_scores"], s["row_req"],
                                                 s["req_rows"], q, s["k"], True, False, s["max_children"],
                                                 rows_best_first=True)[:4]] for s in steps]
        ref = ref or outs
        same = all(all(np.array_equal(x, y) for x, y in zip(o, w)) for o, w in zip(outs, ref))
        whole = GraphedBeamSearch(m, q, lambda step, prev, parents: r["recorded"][step], r["sizes"], gtm=True,
                                  postfilter=True)
        got = whole.replay()
        got = (cp.asnumpy(got.sids), cp.asnumpy(got.scores))
        ref_whole = ref_whole or got
        same = same and all(np.array_equal(x, y) for x, y in zip(got, ref_whole))
        print(f"{v.label()}: outputs equal the first variant's: {same}", flush=True)
        if not same:
            bad += 1
            continue
        graphs = [capture_step(be, s, q, B, w) for s, w in zip(steps, whole.windows)]  # each keeps v's kernels
        timed.append((v, graphs, whole, [[] for _ in steps], []))
    for _ in range(a.rounds):
        for v, graphs, whole, per_step, total in timed:
            for i, (g, st) in enumerate(graphs):
                per_step[i].append(cuda_time(lambda: g.launch(st), reps=20, stream=st))
            total.append(cuda_time(whole.launch, reps=20, stream=whole.stream))
    print(f"\n{'multi-kernel' if a.multi else 'fused'} step, B={B}, beams {r['sizes']}, median of {a.rounds} rounds")
    print("variant | step graphs us (1, 2, ...) | whole graph + post-filter us | ratio to first")
    base = None
    for v, _, _, per_step, total in timed:
        w = 1e3 * float(np.median(total))
        base = base or w
        print(f"{v.name} | {', '.join(f'{1e3 * float(np.median(x)):.1f}' for x in per_step)} | {w:.1f} | "
              f"{base / w:.3f}")
    return 1 if bad else 0


def trie_ab(a) -> int:
    from step_gpu import need_cuda
    need_cuda()
    import numpy as np
    import cupy as cp

    from gtmkit.trie.trie import SuccinctTrie
    from gtmkit.trie import search_cuda as tsc
    from gtmkit.synth.keys import synth_keys
    from gtmkit.synth.proposals import synth_proposals
    t = time.perf_counter()
    trie = SuccinctTrie.build(synth_keys(a.keys, seed=1))
    print(f"trie: {a.keys} keys, {trie.num_nodes} nodes, built in {time.perf_counter() - t:.1f} s")
    pool = 64
    tok, lp = synth_proposals(trie, pool, a.steps, a.bw, seed=2)
    variants, devs = [Variant.parse(s) for s in a.variant], []
    for v in variants:  # each build on a device object of its own (its buffers and graphs)
        dev = tsc.CupyDevice()
        dev.cl = v.value("CL", dev.cl)
        mod = build(tsc.KERNEL_FILE, v, () if any(d.startswith("CL=") for d in v.defines) else (f"CL={dev.cl}",))
        dev._kernels = {(n, ()): mod.get_function(n) for n in ("prep_kernel", "search_kernel")}
        devs.append(dev)
    stream = cp.cuda.get_current_stream()

    def run(dev, q):
        out = tsc.trie_beam_search_cuda(trie, tok[q:q + 1], lp[q:q + 1], a.bw, device=dev)
        stream.synchronize()
        return out

    ref = [run(devs[0], q) for q in range(pool)]  # warm-up (compile, buffers, graphs) and the reference
    for d in devs[1:]:
        run(d, 0)
    times, bad, qi = [[] for _ in devs], [0] * len(devs), 0
    for r in range(a.rounds):
        qs = [(qi + j) % pool for j in range(a.block)]
        qi += a.block
        for i in [(r + j) % len(devs) for j in range(len(devs))]:
            for q in qs:
                t = time.perf_counter()
                ids, sc = run(devs[i], q)
                times[i].append(time.perf_counter() - t)
                if not (np.array_equal(ids, ref[q][0]) and np.allclose(sc, ref[q][1], rtol=0, atol=1e-5)):
                    bad[i] += 1
    base = np.mean(times[0])
    print(f"BW=K={a.bw}, T={a.steps}, b=1: {a.rounds} rounds x {a.block} queries a variant")
    print(f"{'variant':<16} {'mean us':>9} {'p50 us':>9} {'p90 us':>9} {'ratio':>7}  queries differing  build")
    for v, ts, n in zip(variants, times, bad):
        us = 1e6 * np.asarray(ts)
        print(f"{v.name:<16} {us.mean():9.1f} {np.median(us):9.1f} {np.percentile(us, 90):9.1f} "
              f"{base / np.mean(ts):7.3f}  {n:17d}  {v.label()}")
    return 1 if any(bad) else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("step", help="the CD+GTM step")
    s.add_argument("--index", required=True, help="a built index (gtmkit build)")
    s.add_argument("--multi", action="store_true", help="the multi-kernel step (gtm_step.cu) instead of the fused one")
    s.add_argument("--requests", type=int, default=16)
    s.add_argument("--rounds", type=int, default=5)
    t = sub.add_parser("trie", help="the trie search kernel")
    t.add_argument("--keys", type=int, default=1_000_000)
    t.add_argument("--bw", type=int, default=1000, help="BW = K")
    t.add_argument("--steps", type=int, default=8, help="T")
    t.add_argument("--rounds", type=int, default=20)
    t.add_argument("--block", type=int, default=10, help="queries a variant takes in a row")
    for p in (s, t):
        p.add_argument("--variant", action="append", required=True, metavar="NAME[@SRC][:DEF=V,...]",
                       help="a build (repeatable; the first is the reference)")
    a = ap.parse_args()
    return step_ab(a) if a.what == "step" else trie_ab(a)


if __name__ == "__main__":
    sys.exit(main())
