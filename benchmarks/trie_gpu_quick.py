"""Quick CPU vs GPU trie search check (1M synth keys, BW=K=1000, T=8): median latency at b=1 and 8, and equality.

    python benchmarks/trie_gpu_quick.py        # on a machine with a GPU
"""
import time, numpy as np, cupy as cp
from gtmkit.synth_trie import synth_keys, synth_proposals
from gtmkit.indexer.succinct import SuccinctTrie
from gtmkit.matcher.trie_search_cpu import trie_beam_search
trie = SuccinctTrie.build(synth_keys(1_000_000, seed=1))
tok, lp = synth_proposals(trie, 8, 8, 1000, seed=2)
for dev in ("cpu", "cuda"):
    trie_beam_search(trie, tok[:1], lp[:1], 1000, device=dev)
    for b in (1, 8):
        ts = []
        for i in range(5):
            t0 = time.perf_counter(); r = trie_beam_search(trie, tok[:b], lp[:b], 1000, device=dev)
            if dev == "cuda": cp.cuda.Device().synchronize()
            ts.append(time.perf_counter() - t0)
        print(dev, "b", b, "median ms", round(1000 * float(np.median(ts)), 2))
a = trie_beam_search(trie, tok, lp, 1000); g = trie_beam_search(trie, tok, lp, 1000, device="cuda")
print("equal", bool(np.array_equal(a[0], cp.asnumpy(g[0]))))
