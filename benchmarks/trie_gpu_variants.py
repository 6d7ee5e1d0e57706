"""Variants of the GPU trie search kernel timed side by side in one run (b=1 latency, BW = K, T steps).

    PYTHONPATH=. python benchmarks/trie_gpu_variants.py --keys 10000000 \
        --variant new --variant nopf:NO_PREFETCH2=1 --variant old@scratch/old_trie_search.cu

A variant is NAME[@FILE][:DEF=V,DEF=V]: kernels/trie_search.cu (or FILE, e.g. an older revision's copy)
compiled with -DDEF=V (ZWIDE=0: the trie uploaded without wide-group lists; NOGRAPH=1: the launch submitted
each call, no CUDA graph), run through the same host path (trie_beam_search_cuda with its own device object).
Variants take turns in blocks of --block queries, in a rotating order, for --rounds rounds; every query's
results must equal the first variant's. Prints mean / p50 / p90 wall time per query (host call +
synchronize) and each variant's mean relative to the first (ratio > 1: faster). Exit status 1 on any
difference."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import cupy as cp
import numpy as np

from gtmkit.indexer.succinct.trie import SuccinctTrie
from gtmkit.matcher.succinct import search_cuda as tsc
from gtmkit.matcher.cuda.backend import KERNEL_DIR
from gtmkit.matcher.cuda.source import kernel_source
from gtmkit.synth.keys import synth_keys
from gtmkit.synth.proposals import synth_proposals


def parse_variant(spec: str) -> tuple:
    name, _, defs = spec.partition(":")
    name, _, src = name.partition("@")
    return name, Path(src) if src else tsc.KERNEL_FILE, tuple(d for d in defs.split(",") if d)


def make_device(src: Path, defines: tuple) -> "tsc.CupyDevice":
    dev = tsc.CupyDevice()
    mod = cp.RawModule(code=kernel_source(src), options=("--std=c++14", f"-I{KERNEL_DIR}", *(f"-D{d}" for d in defines)))
    dev._kernels = {n: mod.get_function(n) for n in ("prep_kernel", "search_kernel")}
    tsc.size_for_defines(dev, defines)  # the cluster size, the shared memory of the options
    for d in defines:
        if d == "ZWIDE=0":  # the trie's tables without wide-group lists (its own upload of the trie)
            dev.zwide = False
            dev.key = dev.key + ("nowide",)
        if d == "NOGRAPH=1":  # the launch submitted each call instead of a replayed graph
            dev.replay = lambda graphs, key, submit: submit()
    return dev


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--bw", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--variant", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--block", type=int, default=10)
    a = ap.parse_args()
    variants = [parse_variant(v) for v in a.variant]
    t = time.perf_counter()
    trie = SuccinctTrie.build(synth_keys(a.keys, seed=1))
    print(f"trie: {a.keys} keys, {trie.num_nodes} nodes, built in {time.perf_counter() - t:.1f} s")
    pool = 64
    tok, lp = synth_proposals(trie, pool, a.steps, a.bw, seed=2)
    devs = [make_device(src, defs) for _, src, defs in variants]
    stream = cp.cuda.get_current_stream()

    def run(dev, q):
        out = tsc.trie_beam_search_cuda(trie, tok[q:q + 1], lp[q:q + 1], a.bw, device=dev)
        stream.synchronize()
        return out

    ref = {}
    for q in range(pool):  # warm-up (compile, buffers, graphs) and the reference results
        ref[q] = run(devs[0], q)
    for d in devs[1:]:
        run(d, 0)
    times = [[] for _ in devs]
    bad = 0
    qi = 0
    for r in range(a.rounds):
        order = [(r + i) % len(devs) for i in range(len(devs))]
        qs = [(qi + j) % pool for j in range(a.block)]
        qi += a.block
        for v in order:
            for q in qs:
                t = time.perf_counter()
                ids, sc = run(devs[v], q)
                times[v].append(time.perf_counter() - t)
                if not (np.array_equal(ids, ref[q][0]) and np.allclose(sc, ref[q][1], rtol=0, atol=1e-5)):
                    bad += 1
                    if bad <= 3:
                        print(f"  MISMATCH variant {variants[v][0]} query {q}")
    base = np.mean(times[0])
    print(f"BW=K={a.bw}, T={a.steps}, b=1: {a.rounds} rounds x {a.block} queries a variant")
    print(f"{'variant':<24} {'mean us':>9} {'p50 us':>9} {'p90 us':>9} {'ratio':>7}  defines")
    for (name, src, defs), ts in zip(variants, times):
        us = 1e6 * np.asarray(ts)
        print(f"{name:<24} {us.mean():9.1f} {np.median(us):9.1f} {np.percentile(us, 90):9.1f} "
              f"{base / np.mean(ts):7.3f}  {src.name} {' '.join(defs)}")
    print("equal to the first variant:", "yes" if bad == 0 else f"NO ({bad} queries differ)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
