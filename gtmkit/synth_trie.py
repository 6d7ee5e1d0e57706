"""Synthetic succinct-trie workloads (seed 004 App. K): keyword-like integer keys and NAR proposal grids
(a coherent head of r true-path tokens, position-stratified noise after it, an AR-like log-prob tail)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import GtmkitError
from .indexer import succinct_nav as nav

ZIPF_S = 1.0  # token frequency ~ rank^-s; token id = rank, so small ids are frequent as in tokenizers
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _check(name: str, value, lo: int, hi: int = 2**62) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise GtmkitError(f"synth: {name} must be an integer in [{lo}, {hi}], got {value!r}")
    return int(value)


def _zipf_ranks(rng: np.random.Generator, size: int, vocab: int, s: float) -> np.ndarray:
    """Continuous truncated Zipf by inverse CDF: rank in [0, vocab) with P(rank r) ~ (r+1)^-s."""
    u = rng.random(size)
    if abs(s - 1.0) < 1e-9:
        x = np.exp(u * np.log(vocab + 1.0))
    else:
        a = 1.0 - s
        x = (1.0 + u * ((vocab + 1.0) ** a - 1.0)) ** (1.0 / a)
    return np.minimum(x.astype(np.int64) - 1, vocab - 1)


def _length_pmf(min_len: int, max_len: int) -> np.ndarray:
    """Keyword lengths: mode one above the shortest, then a geometric fall-off."""
    d = np.arange(max_len - min_len + 1, dtype=np.float64)
    w = (d + 1.0) * 0.55 ** d
    return w / w.sum()


def _mix(h: np.ndarray) -> np.ndarray:
    h = (h ^ (h >> np.uint64(30))) * _MIX1
    h = (h ^ (h >> np.uint64(27))) * _MIX2
    return h ^ (h >> np.uint64(31))


def synth_keys(n: int, seed: int = 0, vocab: int = 2_200_000, min_len: int = 2, max_len: int = 8,
               as_arrow: bool = True):
    """n distinct keyword-like keys in random order: lengths min_len..max_len (mode min_len+1), tokens
    i.i.d. Zipf(1.0) over [0, vocab) (id = frequency rank). Deterministic from the arguments.

    -> pyarrow ListArray list<int32> (as_arrow) or (tokens int32 [N], offsets int64 [n+1])."""
    n, seed = _check("n", n, 1), _check("seed", seed, 0, 2**63 - 1)
    vocab = _check("vocab", vocab, 2, 2**31)
    min_len = _check("min_len", min_len, 1, 4096)
    max_len = _check("max_len", max_len, min_len, 4096)
    space = sum(float(vocab) ** L for L in range(min_len, min(max_len, 64) + 1))
    if n > 0.5 * space:
        raise GtmkitError(f"synth: {n} distinct keys do not fit vocab {vocab} and lengths {min_len}..{max_len}")
    rng = np.random.default_rng([seed, 0x7E1E])
    pmf = _length_pmf(min_len, max_len)
    lens, cols, hashes, have, idx = [], [], [], 0, []
    for _ in range(64):  # draw, drop repeats (by a 64-bit hash of the key), draw again for the shortfall
        if have >= n:
            break
        m = int((n - have) * 1.05) + 16
        ln = rng.choice(np.arange(min_len, max_len + 1), size=m, p=pmf)
        mat = np.zeros((m, max_len), np.int32)
        h = np.full(m, (seed * int(_MIX1) + 0x51D) % 2**64, np.uint64)
        for j in range(max_len):
            alive = ln > j
            k = int(alive.sum())
            if k == 0:
                break
            mat[alive, j] = _zipf_ranks(rng, k, vocab, ZIPF_S)
            h[alive] = _mix(h[alive] ^ (mat[alive, j].astype(np.uint64) + np.uint64(1)))
        lens.append(ln)
        cols.append(mat)
        hashes.append(h)
        allh = np.concatenate(hashes)
        _, first = np.unique(allh, return_index=True)
        idx = np.sort(first)
        have = len(idx)
    if have < n:
        raise GtmkitError(f"synth: could not draw {n} distinct keys (got {have}); raise vocab or max_len")
    idx = idx[:n]
    ln = np.concatenate(lens)[idx]
    mat = np.concatenate(cols)[idx]
    tokens = mat[np.arange(max_len)[None, :] < ln[:, None]]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(ln, out=offsets[1:])
    if not as_arrow:
        return tokens, offsets
    if offsets[-1] < 2**31:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(tokens))
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(tokens))


def write_keys(path, n: int, seed: int = 0, vocab: int = 2_200_000, min_len: int = 2, max_len: int = 8) -> dict:
    """Write synth_keys as Parquet with one list<int32> column "key"; -> summary dict."""
    keys = synth_keys(n, seed=seed, vocab=vocab, min_len=min_len, max_len=max_len)
    pq.write_table(pa.table({"key": keys}), path)
    lengths = np.diff(keys.offsets.to_numpy())
    return {"path": str(path), "keys": n, "tokens": int(lengths.sum()), "mean_length": round(float(lengths.mean()), 3),
            "vocab": vocab, "seed": seed}


def _logp_tail(rng: np.random.Generator, k: int) -> np.ndarray:
    """An AR-like log-softmax tail, descending: p_i ~ (i+1)^-s with s in [0.7, 1.3], and 5-30% of the
    mass outside the top K."""
    s = rng.uniform(0.7, 1.3)
    z = -s * np.log(np.arange(1, k + 1, dtype=np.float64))
    z -= np.log(np.exp(z - z.max()).sum()) + z.max()
    return (z + np.log1p(-rng.uniform(0.05, 0.3))).astype(np.float32)


def synth_proposals(trie, b: int, T: int, K: int, seed: int = 0, r: int = None) -> tuple:
    """NAR proposal grids for `trie` (seed 004 App. K). Per query a key is drawn; at position t the head
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
