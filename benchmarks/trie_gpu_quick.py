"""Quick GPU vs CPU check of the succinct-trie beam search (issue 5 targets), well under 3 minutes.

    PYTHONPATH=. python benchmarks/trie_gpu_quick.py                # 1M synth keys
    PYTHONPATH=. python benchmarks/trie_gpu_quick.py --keys 10000000

On a trie of --keys synth keys with NAR proposals from synth_proposals (BW = K = 1000, T = 8):
- latency at b=1 over --queries queries, GPU and CPU (numba, 8 threads, and all threads) timed
  interleaved, each a perf_counter around one trie_beam_search call (GPU: plus a stream synchronize);
- where the GPU time goes: device time between events around the whole call, and the search kernel
  alone (relaunched on the already prepared rows), so host overhead = wall - device time;
- throughput at b=8 (q/s = 8 / median batch time), GPU and CPU 8 threads;
- equality: key ids equal and scores within 1e-5 on every query and batch.
Exit status 1 if any result differs."""

from __future__ import annotations

import argparse
import os
import sys
import time

import numba
import numpy as np

from gtmkit.indexer.succinct.trie import SuccinctTrie
from gtmkit.matcher.succinct.search import trie_beam_search
from gtmkit.synth.keys import synth_keys
from gtmkit.synth.proposals import synth_proposals


def stats_ms(ts) -> str:
    ts = 1000 * np.asarray(ts)
    return (f"mean {ts.mean():.3f}  p50 {np.median(ts):.3f}  p95 {np.percentile(ts, 95):.3f}  "
            f"p99 {np.percentile(ts, 99):.3f} ms")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--bw", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--reps", type=int, default=30, help="b=8 batches timed per device")
    a = ap.parse_args()
    import cupy as cp
    from gtmkit.matcher.succinct import search_cuda as tsc

    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    print(f"GPU {name}  CPU {os.cpu_count()} cores  numba threads {numba.config.NUMBA_NUM_THREADS}")
    t = time.perf_counter()
    trie = SuccinctTrie.build(synth_keys(a.keys, seed=1))
    print(f"trie: {a.keys} keys, {trie.num_nodes} nodes, built in {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    pool = 64
    tok, lp = synth_proposals(trie, pool, a.steps, a.bw, seed=2)
    print(f"proposals: {pool} queries x T={a.steps} x K={a.bw} in {time.perf_counter() - t:.1f} s")
    bw = a.bw
    stream = cp.cuda.get_current_stream()
    all_threads = numba.config.NUMBA_NUM_THREADS
    cpu8 = min(8, all_threads)

    def gpu(q):
        return trie_beam_search(trie, tok[q], lp[q], bw, device="cuda")

    def cpu(q, threads):
        numba.set_num_threads(threads)
        return trie_beam_search(trie, tok[q], lp[q], bw)

    bad = 0

    def check(g, c, what):
        nonlocal bad
        ids, sc = cp.asnumpy(g[0]), cp.asnumpy(g[1])
        ok = np.array_equal(ids, c[0]) and np.allclose(sc, c[1], rtol=0, atol=1e-5) \
            and np.array_equal(np.isneginf(sc), np.isneginf(c[1]))
        if not ok:
            bad += 1
            if bad <= 3:
                print(f"  MISMATCH {what}: gpu {ids[0, :8]} cpu {c[0][0, :8]}")

    t = time.perf_counter()
    for q in (slice(0, 1), slice(0, 8)):  # compile (NVRTC, numba) and allocate
        gpu(q)
        cpu(q, cpu8)
    stream.synchronize()
    print(f"warm-up {time.perf_counter() - t:.1f} s")

    # b = 1 latency, devices interleaved
    tg, t8, ta, dev_ms = [], [], [], []
    ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
    for i in range(a.queries):
        q = slice(i % pool, i % pool + 1)
        stream.synchronize()
        t = time.perf_counter()
        ev0.record(stream)
        g = gpu(q)
        ev1.record(stream)
        stream.synchronize()
        tg.append(time.perf_counter() - t)
        dev_ms.append(cp.cuda.get_elapsed_time(ev0, ev1))
        t = time.perf_counter()
        c = cpu(q, cpu8)
        t8.append(time.perf_counter() - t)
        if i < 50:
            t = time.perf_counter()
            cpu(q, all_threads)
            ta.append(time.perf_counter() - t)
        check(g, c, f"query {i % pool}")
    # the search kernel alone, on the rows the last call prepared
    buf = tsc._nar_buffers(tsc.cuda_device(), (1, bw, a.steps, a.bw, a.steps + 1))
    ids, scores = cp.empty((1, bw), cp.int64), cp.empty((1, bw), cp.float32)
    tp = tsc._trie_params(tsc.cuda_device(), trie, "bench")
    kern = []
    for _ in range(20):
        ev0.record(stream)
        tsc._search(tsc.cuda_device(), buf, tp, (buf.ptok, buf.plp, buf.pcnt), a.steps, True, 0, a.steps,
                    a.steps - 1, True, 0, np.float32(-np.inf), (ids, scores))
        ev1.record(stream)
        stream.synchronize()
        kern.append(cp.cuda.get_elapsed_time(ev0, ev1))
    gpu_mean, cpu_mean = np.mean(tg), np.mean(t8)
    print(f"\nlatency b=1, BW=K={bw}, T={a.steps}, {a.queries} queries:")
    print(f"  GPU            {stats_ms(tg)}")
    print(f"    device time of the call (events) mean {np.mean(dev_ms):.3f} ms; search kernel alone "
          f"{np.median(kern):.3f} ms (median); host overhead ~{1000 * gpu_mean - np.mean(dev_ms):.3f} ms")
    print(f"  CPU {cpu8:2d} threads {stats_ms(t8)}")
    print(f"  CPU {all_threads:2d} threads {stats_ms(ta)}  ({len(ta)} queries)")
    print(f"  GPU speed-up vs CPU {cpu8} threads: mean {cpu_mean / gpu_mean:.1f}x  "
          f"median {np.median(t8) / np.median(tg):.1f}x")

    # b = 8 throughput
    res = {}
    for name, fn in (("GPU", gpu), (f"CPU {cpu8} threads", lambda q: cpu(q, cpu8))):
        ts = []
        for i in range(a.reps):
            s0 = (8 * i) % (pool - 7)
            stream.synchronize()
            t = time.perf_counter()
            r = fn(slice(s0, s0 + 8))
            if name == "GPU":
                stream.synchronize()
            ts.append(time.perf_counter() - t)
            res.setdefault(i, {})[name] = r
        print(f"throughput b=8: {name:14s} {8 / np.median(ts):8.0f} q/s (median batch {1000 * np.median(ts):.3f} ms)")
    for i, r in res.items():
        check(r["GPU"], r[f"CPU {cpu8} threads"], f"batch {i}")
    print(f"\nequal: {'yes' if bad == 0 else f'NO ({bad} mismatches)'} "
          f"({a.queries} queries at b=1, {a.reps} batches at b=8)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
