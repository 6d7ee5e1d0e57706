"""Where a GPU trie query's time goes outside the search kernel (issue 5's latency figure is wall time of
`trie_beam_search(..., device="cuda")` plus copying the results to the host): host submission, device time
(events) of the whole call and of the search kernel alone, the result copies, and how much a CPU search
run just before (as benchmarks/trie.py interleaves them) adds.

    PYTHONPATH=. python benchmarks/trie_gpu_overhead.py --keys 10000000     # on a GPU; prints a table
"""
from __future__ import annotations

import argparse
import time

import cupy as cp
import numpy as np

from gtmkit import trie_beam_search
from gtmkit.indexer.succinct.trie import SuccinctTrie
from gtmkit.matcher.succinct import search_cuda as tsc
from gtmkit.synth.keys import synth_keys
from gtmkit.synth.proposals import synth_proposals


def timed(fn, n: int) -> np.ndarray:
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return 1e6 * np.asarray(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--bw", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--threads", type=int, default=8)
    a = ap.parse_args()
    import numba
    numba.set_num_threads(min(a.threads, numba.config.NUMBA_NUM_THREADS))
    trie = SuccinctTrie.build(synth_keys(a.keys, seed=1))
    tok, lp = synth_proposals(trie, a.queries, a.steps, a.bw, seed=2)
    n, bw = a.queries, a.bw
    stream = cp.cuda.get_current_stream()
    q = lambda i: (tok[i:i + 1], lp[i:i + 1])  # noqa: E731

    def gpu_public(i):
        ids, sc = trie_beam_search(trie, *q(i), bw, device="cuda")  # NumPy results: copied back in the call

    def cpu(i):
        trie_beam_search(trie, *q(i), bw, device="cpu")

    for f in (gpu_public, cpu):  # compile, upload, buffers
        f(0)
    stream.synchronize()
    rows = {}
    rows["GPU query alone: trie_beam_search(cuda), results on the host"] = timed(gpu_public, n)
    rows["CPU query alone (numba threads: %d, layer %s)" % (numba.get_num_threads(), numba.threading_layer())] = \
        timed(cpu, n)

    def after_cpu(i, pause=0.0):
        cpu(i)
        if pause:
            time.sleep(pause)
        t = time.perf_counter()
        gpu_public(i)
        return time.perf_counter() - t

    rows["GPU query right after a CPU query (trie.py's interleaving)"] = 1e6 * np.array([after_cpu(i) for i in range(n)])
    rows["GPU query 5 ms after a CPU query"] = 1e6 * np.array([after_cpu(i, 0.005) for i in range(n)])

    def after_idle(i, spin):  # GPU idle 3 ms, the host asleep or busy meanwhile: which one slows the query?
        t = time.perf_counter()
        if spin:
            while time.perf_counter() - t < 0.003:
                pass
        else:
            time.sleep(0.003)
        t = time.perf_counter()
        gpu_public(i)
        return time.perf_counter() - t

    rows["GPU query after 3 ms of host sleep (no CPU query)"] = 1e6 * np.array([after_idle(i, False) for i in range(n)])
    rows["GPU query after 3 ms of host busy loop (no CPU query)"] = 1e6 * np.array([after_idle(i, True) for i in range(n)])

    def cuda_sync(i):
        tsc.trie_beam_search_cuda(trie, *q(i), bw)
        stream.synchronize()

    rows["trie_beam_search_cuda + synchronize"] = timed(cuda_sync, n)
    ev = [cp.cuda.Event() for _ in range(2)]
    out_ids, out_scores = cp.empty((1, bw), cp.int64), cp.empty((1, bw), cp.float32)
    dev_all, dev_search = [], []
    dev = tsc.cuda_device()
    buf = dev.buffers[(1, bw, a.steps, bw, a.steps + 1)]
    for i in range(n):
        ev[0].record(stream)
        tsc.trie_beam_search_cuda(trie, *q(i), bw)
        ev[1].record(stream)
        ev[1].synchronize()
        dev_all.append(1e3 * cp.cuda.get_elapsed_time(ev[0], ev[1]))
        # the search kernel alone, again on the proposals this call prepared (it starts from the root)
        ev[0].record(stream)
        tsc._search(dev, buf, tsc._trie_params(dev, trie, "x"), (buf.ptok, buf.plp, buf.pcnt), a.steps, True, 0,
                    a.steps, a.steps - 1, True, 0, np.float32(-np.inf), (out_ids, out_scores))
        ev[1].record(stream)
        ev[1].synchronize()
        dev_search.append(1e3 * cp.cuda.get_elapsed_time(ev[0], ev[1]))
    rows["device: whole call (events)"] = np.asarray(dev_all)
    rows["device: search kernel alone (events)"] = np.asarray(dev_search)

    def on_device(fn) -> np.ndarray:  # events around work queued with no host work in between
        out = []
        for _ in range(n):
            ev[0].record(stream)
            fn()
            ev[1].record(stream)
            ev[1].synchronize()
            out.append(1e3 * cp.cuda.get_elapsed_time(ev[0], ev[1]))
        return np.asarray(out)

    dev.copy_in(buf.up, buf.host, 8 * buf.nf + 8 * a.steps * bw)  # a device copy of the staging for prep alone
    rows["device: prep_kernel alone"] = on_device(lambda: tsc._prep(dev, buf, a.steps, np.float32(-np.inf), False))
    graph = next(g for g in buf.graphs.values() if g)
    rows["device: graph replay alone (prep, search; proposals and results in pinned memory)"] = on_device(lambda: graph.launch(stream))
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    for i in range(200):
        tsc.trie_beam_search_cuda(trie, *q(i % n), bw)
        stream.synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
    small = cp.zeros(bw, cp.int64)
    rows["one .get() of [1, BW] int64 alone"] = timed(lambda i: small.get(), n)
    noop = cp.RawKernel('extern "C" __global__ void noop() {}', "noop")
    rows["empty kernel launch + synchronize"] = timed(lambda i: (noop((1,), (32,), ()), stream.synchronize()), n)
    print(f"trie {a.keys} keys, BW=K={bw}, T={a.steps}, b=1, {n} queries each; microseconds; graph capture: "
          f"{dev.graph_error or 'ok'}")
    print("| what | mean | p50 | p90 |\n|---|---|---|---|")
    for k, v in rows.items():
        print(f"| {k} | {v.mean():.1f} | {np.percentile(v, 50):.1f} | {np.percentile(v, 90):.1f} |")
    print("\nhost profile of 200 trie_beam_search_cuda calls + synchronize (seconds):")
    print("\n".join(text.getvalue().splitlines()[:40]))


if __name__ == "__main__":
    main()
