"""Where the GPU trie search spends its time: the search kernel built with -DPROFILE (block 0's thread 0
stamps %globaltimer at phase ends, trie/kernels/trie_search.cu), per step, at b=1, T=8, for a
few BW=K. Prints tables; with --out also writes them to <out>/profile_trie_<host>.md.

    python benchmarks/tools/profile_trie.py --keys 10000000                   # a GPU
    python benchmarks/tools/profile_trie.py --keys 10000000 --variant old@HEAD~1
    ncu --profile-from-start off -k regex:search_kernel -c 1 -o trie \
        python benchmarks/tools/profile_trie.py --keys 10000000 --bw 1000 --ncu  # the shipped build under ncu

--variant NAME[@SRC][:DEF=V,...] as in ab_gpu.py (tools/_kernels.py; a CL define also sets the launch);
PROFILE is always added (not with --ncu, which runs the shipped build once inside cudaProfilerStart/Stop)."""
from __future__ import annotations

import argparse
import datetime
import io
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent))

from _kernels import Variant, build  # noqa: E402

PHASES = {9: "prep rows", 0: "start", 2: "phase A", 1: "fold copy", 3: "phase B", 5: "radix select", 6: "compact",
          7: "sort", 4: "live list", 8: "finalize"}  # phase B: B1 and B2 (one loop since the cluster kernel)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--bw", default="100,1000")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--variant", default="", metavar="NAME[@SRC][:DEF=V,...]", help="the build to profile")
    ap.add_argument("--ncu", action="store_true", help="only one plain BW=K query inside cudaProfilerStart/Stop "
                    "(run under ncu --profile-from-start off)")
    ap.add_argument("--out", help="also write the tables to <out>/profile_trie_<host>.md")
    ap.add_argument("--host", help="host kind in the file name (default: the GPU's model, e.g. h200)")
    a = ap.parse_args()
    from step_gpu import need_cuda
    need_cuda()
    text = io.StringIO()
    with redirect_stdout(text):
        profile(a)
    print(text.getvalue(), end="")
    if a.out and not a.ncu:
        from _common import gpu_name, result_paths
        _, md = result_paths(a.out, "profile_trie", a.host, gpu_name())
        md.write_text(f"# Trie search: time per phase inside the kernel ({gpu_name()}, "
                      f"{datetime.date.today().isoformat()})\n\nCommand: `python {' '.join(sys.argv)}`.\n\n```\n"
                      f"{text.getvalue()}```\n")


def profile(a) -> None:
    import cupy as cp
    import numpy as np

    from gtmkit.trie.trie import SuccinctTrie
    from gtmkit.trie import search_cuda as tsc
    from gtmkit.synth.keys import synth_keys
    from gtmkit.synth.proposals import synth_proposals
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
    v = Variant.parse(a.variant or "shipped")
    dev.cl = v.value("CL", dev.cl)
    mod = build(tsc.KERNEL_FILE, v, ("PROFILE",) + (() if any(d.startswith("CL=") for d in v.defines)
                                                    else (f"CL={dev.cl}",)))
    print(f"build: {v.label()} -DPROFILE")
    dev._kernels = {(n, ()): mod.get_function(n) for n in ("prep_kernel", "search_kernel")}
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
