"""Does the CPU baseline slow the GPU search it is compared with? benchmarks/trie.py times the devices in
turns on one host (blocks of 10 queries, each turn after one untimed query). After a CPU query the search's
OpenMP workers keep spinning for a while; a GPU turn that starts meanwhile shares the cores with them. This
times b=1 GPU queries (trie_beam_search, device="cuda", results on the host) in such turns, with and without
waiting for the workers to stop, against GPU turns with no CPU search at all, and shows how long the workers
stay busy after one CPU query; and GPU turns while a resident TrieSearchServer (trie.py's third device) polls
host memory.

    PYTHONPATH=. python benchmarks/trie_gpu_crosstalk.py --keys 10000000     # on a GPU; prints tables
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import busy_threads, settle_workers  # noqa: E402
from gtmkit import trie_beam_search  # noqa: E402
from gtmkit.indexer.succinct.trie import SuccinctTrie  # noqa: E402
from gtmkit.synth.keys import synth_keys  # noqa: E402
from gtmkit.synth.proposals import synth_proposals  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--bw", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--device", default="cuda", help="the device timed against the CPU search (cpu: a dry run)")
    a = ap.parse_args()
    import numba
    numba.set_num_threads(min(a.threads, numba.config.NUMBA_NUM_THREADS))
    trie = SuccinctTrie.build(synth_keys(a.keys, seed=1))
    tok, lp = synth_proposals(trie, a.queries, a.steps, a.bw, seed=3)

    def gpu(i):
        return trie_beam_search(trie, tok[i:i + 1], lp[i:i + 1], a.bw, device=a.device)

    def cpu(i):
        return trie_beam_search(trie, tok[i:i + 1], lp[i:i + 1], a.bw, device="cpu")

    gpu(0), cpu(0)
    print(f"trie {a.keys} keys, BW=K={a.bw}, T={a.steps}, b=1; numba {numba.get_num_threads()} threads, layer "
          f"{numba.threading_layer()}")
    print("\nthreads of this process running after one CPU query (median of 20), by time since it returned:")
    marks = (0.0, 0.5e-3, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3, 50e-3, 100e-3)
    seen = np.zeros((20, len(marks)))
    for r in range(20):
        cpu(r)
        t0 = time.perf_counter()
        for j, m in enumerate(marks):
            while time.perf_counter() - t0 < m:
                pass
            seen[r, j] = busy_threads()
    print(" | ".join(f"{1e3 * m:g} ms: {np.median(seen[:, j]):.0f}" for j, m in enumerate(marks)))

    modes = {
        "GPU turns only (no CPU search between)": None,
        "CPU and GPU turns (trie.py's order)": "none",
        "CPU and GPU turns, GPU turn after the workers stop": "settle",
        "CPU and GPU turns, GPU turn after a 20 ms busy wait": "busy20",
        "GPU turns while a TrieSearchServer is resident (polling host memory)": "server",
    }
    if a.device != "cuda":
        modes.pop("GPU turns while a TrieSearchServer is resident (polling host memory)")
    res = {m: {"gpu": [], "cpu": [], "wait": []} for m in modes}
    for start in range(0, a.queries, a.block):
        for name, how in modes.items():  # the modes take turns too, so host drift falls on all of them
            qs = range(start, min(start + a.block, a.queries))
            if how is not None:
                cpu(start)
                for i in qs:
                    t = time.perf_counter(); cpu(i); res[name]["cpu"].append(time.perf_counter() - t)
                if how == "settle":
                    res[name]["wait"].append(settle_workers())
                elif how == "busy20":
                    t = time.perf_counter()
                    while time.perf_counter() - t < 0.02:
                        pass
            server = None
            if how == "server":
                from gtmkit.matcher.succinct.server_cuda import TrieSearchServer
                server = TrieSearchServer(trie, a.bw, a.steps, a.bw)
                server.search(tok[start], lp[start])
            gpu(start)
            for i in qs:
                t = time.perf_counter(); gpu(i); res[name]["gpu"].append(time.perf_counter() - t)
            if server is not None:
                server.close()
    print(f"\n{a.queries} queries a mode, turns of {a.block} after 1 untimed; ms")
    print("| mode | GPU mean | GPU p50 | GPU p90 | CPU mean | CPU / GPU mean | wait for the workers, ms median (max) |")
    print("|---|---|---|---|---|---|---|")
    for name, r in res.items():
        g = 1e3 * np.asarray(r["gpu"])
        c = 1e3 * np.asarray(r["cpu"]) if r["cpu"] else None
        w = 1e3 * np.asarray(r["wait"]) if r["wait"] else None
        print(f"| {name} | {g.mean():.3f} | {np.median(g):.3f} | {np.percentile(g, 90):.3f} | "
              + (f"{c.mean():.3f} | {c.mean() / g.mean():.1f}x" if c is not None else "n/a | n/a")
              + (f" | {np.median(w):.1f} ({w.max():.1f})" if w is not None else " | n/a") + " |")


if __name__ == "__main__":
    main()
