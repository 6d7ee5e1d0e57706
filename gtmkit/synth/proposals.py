"""Synthetic NAR proposal grids for a succinct trie (FlashTrie App. K): a coherent head of r true-path
tokens, position-stratified noise after it, an AR-like log-prob tail."""

from __future__ import annotations

import numpy as np

from ..trie import nav
from .keys import _check


def _logp_tail(rng: np.random.Generator, k: int) -> np.ndarray:
    """An AR-like log-softmax tail, descending: p_i ~ (i+1)^-s with s in [0.7, 1.3], and 5-30% of the
    mass outside the top K."""
    s = rng.uniform(0.7, 1.3)
    z = -s * np.log(np.arange(1, k + 1, dtype=np.float64))
    z -= np.log(np.exp(z - z.max()).sum()) + z.max()
    return (z + np.log1p(-rng.uniform(0.05, 0.3))).astype(np.float32)


def synth_proposals(trie, b: int, T: int, K: int, seed: int = 0, r: int = None) -> tuple:
    """NAR proposal grids for `trie` (FlashTrie App. K). Per query a key is drawn; at position t the head
    (ranks [0, r)) is its token at t (at a rank ~ geometric) plus other children of its length-t prefix
    (a coherent AR head); ranks [r, K) are noise drawn from the position-stratified marginal (labels of
    random depth-(t+1) nodes; negative ids pad rows a tiny trie cannot fill). Tokens in a row are
    distinct; log-probs are an AR-like tail.

    r defaults to max(1, K // 10). -> (tokens int32 [b, T, K], logp float32 [b, T, K]), each row sorted
    by logp descending."""
    b, T, K = _check("b", b, 1), _check("T", T, 1, 4096), _check("K", K, 1, 2**20)
    r = max(1, K // 10) if r is None else _check("r", r, 0, K)
    rng = np.random.default_rng([_check("seed", seed, 0, 2**63 - 1), 0xF1A5])
    a = trie.arrays
    lo = np.asarray(a.level_offsets)
    tokens = np.empty((b, T, K), np.int32)
    logp = np.empty((b, T, K), np.float32)
    spare = -1
    for q in range(b):
        path = trie.key(int(rng.integers(trie.num_keys)))
        node = 0
        for t in range(T):
            head = []
            if t < len(path):
                first, end = trie.child_range(node)
                node = trie.find_child(node, path[t])
                # other children of the prefix: the plausible continuations an AR head holds
                pick = np.unique(rng.integers(first, end, size=2 * r + 2))
                rng.shuffle(pick)
                head = [int(x) for x in nav.labels_of(a, pick[pick != node][:max(r - 1, 0)])]
                head.insert(min(int(rng.geometric(0.5)) - 1, len(head)), path[t])
            head = head[:r]
            depth = min(t + 1, len(lo) - 2)
            pool = rng.integers(max(lo[depth], 1), lo[depth + 1], size=2 * K + 16) if depth >= 1 else []
            row = list(dict.fromkeys(head + [int(x) for x in nav.labels_of(a, np.asarray(pool, np.int64))]))
            while len(row) < K:  # tiny tries: pad with distinct negative ids, which match nothing
                row.append(spare)
                spare -= 1
            tokens[q, t] = row[:K]
            logp[q, t] = _logp_tail(rng, K)
    return tokens, logp


def write_proposals(path, trie, b: int, T: int, K: int, seed: int = 0, r: int = None) -> dict:
    """Write synth_proposals to an .npz with arrays tokens [b, T, K] int32 and logp [b, T, K] float32."""
    tokens, logp = synth_proposals(trie, b, T, K, seed=seed, r=r)
    with open(path, "wb") as f:
        np.savez(f, tokens=tokens, logp=logp)
    return {"path": str(path), "b": b, "T": T, "K": K, "r": max(1, K // 10) if r is None else r, "seed": seed}
