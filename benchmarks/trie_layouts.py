"""Search time of a trie in the label layout its build chooses against the same keys in format 2's layout
(`SuccinctTrie.build(keys, tails=False)`), on the CPU and the GPU, in one process: each device runs the two tries
in turn, twice, on the same proposals (synth_proposals, T=8, b=1), and their results are checked equal.

    python benchmarks/trie_layouts.py --keys 10000000 --kind sid --queries 30

--kind sid: SID-like keys (three tokens of 256, then one of 4); synth: synth_keys. Prints one line a point; the
figures go into benchmarks/results/trie_layouts_<gpu>.md by hand, beside benchmarks/trie.py's comparison."""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa


def keys_of(kind: str, n: int):
    if kind == "sid":
        rng = np.random.default_rng(5)
        tok = np.c_[rng.integers(0, 256, (n, 3)), rng.integers(0, 4, (n, 1))].astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(np.arange(0, 4 * n + 1, 4, dtype=np.int32)), pa.array(tok.ravel()))
    from gtmkit.synth.keys import synth_keys
    return synth_keys(n, seed=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--kind", choices=("sid", "synth"), default="sid")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--devices", default="cpu,cuda")
    a = ap.parse_args()
    from gtmkit import SuccinctTrie, trie_beam_search
    from gtmkit.synth.proposals import synth_proposals
    keys = keys_of(a.kind, a.keys)
    tries = {}
    for name, tails in (("chosen", True), ("format2", False)):
        t = time.perf_counter()
        tries[name] = trie = SuccinctTrie.build(keys, tails=tails)
        s = trie.stats()
        print(f"{name}: build {time.perf_counter() - t:.1f} s, {trie.nbytes:,} bytes ({trie.nbytes / a.keys:.2f} a key), "
              f"{s['tail_nodes']:,} tail nodes, {s['low_bits']}-bit labels, {s['const_levels']} constant levels")
    for bw in (100, 1000):
        tok, lp = synth_proposals(tries["format2"], a.queries, 8, bw, seed=2)
        for dev in a.devices.split(","):
            times = {"chosen": [], "format2": []}
            for name in ("chosen", "format2", "chosen", "format2"):
                trie_beam_search(tries[name], tok[:1], lp[:1], bw, device=dev)  # warm
                ts = []
                for q in range(a.queries):
                    t = time.perf_counter()
                    trie_beam_search(tries[name], tok[q:q + 1], lp[q:q + 1], bw, device=dev)
                    ts.append(time.perf_counter() - t)
                times[name].append(1e3 * float(np.mean(ts)))
            got = [np.asarray(trie_beam_search(tries[n], tok, lp, bw, device=dev)[0]) for n in ("chosen", "format2")]
            assert np.array_equal(*got), "the two layouts answered differently"
            print(f"{a.kind} {a.keys:,} BW=K={bw} T=8 b=1 {dev}: mean ms chosen "
                  + ", ".join(f"{x:.3f}" for x in times["chosen"]) + "; format 2 " + ", ".join(f"{x:.3f}" for x in times["format2"]))


if __name__ == "__main__":
    main()
