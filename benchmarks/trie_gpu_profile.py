"""Where the GPU trie search spends its time: the search kernel compiled with -DTRIE_PROF (block 0's
thread 0 stamps %globaltimer at phase ends, kernels/trie_search.cu), per step, at b=1, T=8, for a few BW=K.

    PYTHONPATH=. python benchmarks/trie_gpu_profile.py --keys 10000000     # on a GPU; prints a table
"""
from __future__ import annotations

import argparse
import time

import cupy as cp
import numpy as np

from gtmkit.indexer.succinct.trie import SuccinctTrie
from gtmkit.matcher.succinct import search_cuda as tsc
from gtmkit.matcher.cuda.backend import KERNEL_DIR
from gtmkit.matcher.cuda.source import kernel_source
from gtmkit.synth.keys import synth_keys
from gtmkit.synth.proposals import synth_proposals

PHASES = {9: "prep rows", 0: "start", 2: "phase A", 1: "fold copy", 3: "phase B", 5: "radix select", 6: "compact",
          7: "sort", 4: "live list", 8: "finalize"}  # phase B: B1 and B2 (one loop since the cluster kernel)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--bw", default="100,1000")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--define", action="append", default=[], metavar="NAME=VALUE",
                    help="compile the profiled kernel with -DNAME=VALUE (e.g. CL=4; repeatable)")
    ap.add_argument("--ncu", action="store_true", help="only one plain BW=K query inside cudaProfilerStart/Stop "
                    "(run under ncu --profile-from-start off)")
    a = ap.parse_args()
    t = time.perf_counter()
    trie = SuccinctTrie.build(synth_keys(a.keys, seed=1))
    print(f"trie: {a.keys} keys, {trie.num_nodes} nodes, {trie.nbytes / 1e6:.1f} MB, {time.perf_counter() - t:.1f} s")
    dev = tsc.cuda_device()
    if a.ncu:
        bw = int(a.bw.split(",")[-1])
        tok, lp = synth_proposals(trie, 2, a.steps, bw, seed=2)
        tsc.trie_beam_search_cuda(trie, tok[:1], lp[:1], bw)
        cp.cuda.Device().synchronize()
        cp.cuda.profiler.start()
        tsc.trie_beam_search_cuda(trie, tok[1:2], lp[1:2], bw)
        cp.cuda.Device().synchronize()
        cp.cuda.profiler.stop()
        return
    mod = cp.RawModule(code=kernel_source(tsc.KERNEL_FILE), options=("--std=c++14", f"-I{KERNEL_DIR}", "-DTRIE_PROF",
                                                                   *(f"-D{d}" for d in a.define)))
    if a.define:
        print("defines:", " ".join(a.define))
    dev._kernels = {n: mod.get_function(n) for n in ("prep_kernel", "search_kernel")}
    tsc.size_for_defines(dev, a.define)  # the cluster size, the shared memory of the options
    prof = cp.ndarray((116,), cp.uint64, memptr=mod.get_global("trie_prof"))
    stream = cp.cuda.get_current_stream()
    for bw in (int(x) for x in a.bw.split(",")):
        tok, lp = synth_proposals(trie, a.queries, a.steps, bw, seed=2)
        tsc.trie_beam_search_cuda(trie, tok[:1], lp[:1], bw)  # warm-up
        stream.synchronize()
        acc = np.zeros(116)
        walls, dev_ms = [], []
        ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
        for q in range(a.queries):
            prof[:] = 0
            prof[30] = 8  # no step yet
            stream.synchronize()
            t = time.perf_counter()
            ev0.record(stream)
            tsc.trie_beam_search_cuda(trie, tok[q:q + 1], lp[q:q + 1], bw)
            ev1.record(stream)
            stream.synchronize()
            walls.append(time.perf_counter() - t)
            dev_ms.append(cp.cuda.get_elapsed_time(ev0, ev1))
            p = cp.asnumpy(prof).astype(np.float64)
            acc += p
        acc /= a.queries
        steps = max(acc[12], 1)
        print(f"\nBW=K={bw}, b=1, T={a.steps}, trie {a.keys} keys: wall {1e3 * np.mean(walls):.3f} ms, "
              f"device (events) {np.mean(dev_ms):.3f} ms; per query: work items {acc[10]:.0f}, "
              f"live candidates {acc[11]:.0f}, steps {steps:.1f}")
        tot = sum(acc[i] for i in PHASES) + acc[112:115].sum()  # with block 0's row preparation
        for i, name in PHASES.items():
            print(f"  {name:12s} {acc[i] / 1e3:8.1f} us per query  {acc[i] / 1e3 / steps:7.1f} us per step  "
                  f"{100 * acc[i] / max(tot, 1):5.1f}%")
        print(f"  {'kernel':12s} {tot / 1e3:8.1f} us per query")
        print("  prep rows, block 0's rows (us per query): read " + ", sort ".join(
            f"{acc[112 + i] / 1e3:.1f}" for i in range(2)) + f", keep + write {acc[114] / 1e3:.1f}")
        print("  per step t: us (work items) " + ", ".join(
            f"{t}: {acc[13 + t] / 1e3:.1f} ({acc[21 + t]:.0f})" for t in range(min(a.steps, 8))))
        cols = [i for i in PHASES if i not in (0, 8, 9)]
        print("  per step and phase, us:  step " + " ".join(f"{PHASES[i]:>9s}" for i in cols))
        for t in range(min(a.steps, 8)):
            print(f"  {'':24s}{t:5d} " + " ".join(f"{acc[32 + 10 * t + i] / 1e3:9.1f}" for i in cols))


if __name__ == "__main__":
    main()
