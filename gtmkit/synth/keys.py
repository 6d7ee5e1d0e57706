"""Synthetic succinct-trie keys (FlashTrie App. K): distinct keyword-like integer keys with Zipf tokens."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import GtmkitError
from .parts import write_parts

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


def _rank_pmf(vocab: int, s: float) -> np.ndarray:
    """float64 [vocab]: P(rank r) of _zipf_ranks (rank r covers [r + 1, r + 2) of the continuous draw)."""
    x = np.arange(1, vocab + 2, dtype=np.float64)
    cdf = np.log(x) / np.log(vocab + 1.0) if abs(s - 1.0) < 1e-9 else \
        (x ** (1.0 - s) - 1.0) / ((vocab + 1.0) ** (1.0 - s) - 1.0)
    return np.diff(cdf)


def _class_ranks(rng: np.random.Generator, size: int, vocab: int, s: float, part: int, parts: int) -> np.ndarray:
    """Zipf ranks conditioned on rank % parts == part, drawn from that class's own distribution (inverse CDF over
    its vocab / parts ranks: a rejection sampler drew parts times the keys, 97 GiB for a billion keys in 200 parts)."""
    ranks = np.arange(part, vocab, parts, dtype=np.int64)
    cum = np.cumsum(_rank_pmf(vocab, s)[part::parts])
    at = np.searchsorted(cum, rng.random(size) * cum[-1], side="right")
    return ranks[np.minimum(at, len(ranks) - 1)]


def class_shares(vocab: int, parts: int, s: float = ZIPF_S) -> np.ndarray:
    """The probability that a key's first token (a Zipf rank) falls in each class rank % parts."""
    return np.bincount(np.arange(vocab) % parts, weights=_rank_pmf(vocab, s), minlength=parts)


def part_sizes(n: int, vocab: int, parts: int) -> np.ndarray:
    """Keys of each part: n split in proportion to the classes' shares (largest remainder, summing to n)."""
    want = class_shares(vocab, parts) * n
    sizes = np.floor(want).astype(np.int64)
    sizes[np.argsort(-(want - sizes), kind="stable")[:n - int(sizes.sum())]] += 1
    return sizes


def synth_keys(n: int, seed: int = 0, vocab: int = 2_200_000, min_len: int = 2, max_len: int = 8,
               as_arrow: bool = True, part: int = 0, parts: int = 1):
    """n distinct keyword-like keys in random order: lengths min_len..max_len (mode min_len+1), tokens
    i.i.d. Zipf(1.0) over [0, vocab) (id = frequency rank). Deterministic from the arguments.

    parts > 1: the keys of part `part` of a key set drawn as `parts` independent parts: every first token has
    rank % parts == part, so parts never share a key and together keep the Zipf first token (n per part:
    part_sizes). -> pyarrow ListArray list<int32> (as_arrow) or (tokens int32 [N], offsets int64 [n+1])."""
    n, seed = _check("n", n, 1), _check("seed", seed, 0, 2**63 - 1)
    vocab = _check("vocab", vocab, 2, 2**31)
    min_len = _check("min_len", min_len, 1, 4096)
    max_len = _check("max_len", max_len, min_len, 4096)
    parts = _check("parts", parts, 1, vocab)
    part = _check("part", part, 0, parts - 1)
    space = sum(float(vocab) ** L for L in range(min_len, min(max_len, 64) + 1))
    if n > 0.5 * space / parts:
        raise GtmkitError(f"synth: {n} distinct keys do not fit vocab {vocab} and lengths {min_len}..{max_len}")
    rng = np.random.default_rng([seed, 0x7E1E] if parts == 1 else [seed, 0x7E1E, parts, part])
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
            mat[alive, j] = _zipf_ranks(rng, k, vocab, ZIPF_S) if j or parts == 1 else \
                _class_ranks(rng, k, vocab, ZIPF_S, part, parts)
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


def _write_key_part(file, part: int, n: int, parts: int, kw: dict) -> int:
    """Part `part` of a key set drawn as `parts` parts, n keys, as one Parquet file; -> keys written."""
    pq.write_table(pa.table({"key": synth_keys(n, part=part, parts=parts, **kw)}), str(file))
    return n


def write_keys(path, n: int, seed: int = 0, vocab: int = 2_200_000, min_len: int = 2, max_len: int = 8,
               parts: int = 1, workers: int = 1, progress=None) -> dict:
    """Write synth_keys as Parquet with one list<int32> column "key"; -> summary dict. parts > 1 (or workers > 1,
    which makes parts at least workers): `path` is a new directory of that many parts (synth/parts.py), drawn
    by `workers` processes: a different key set from the single file's, the same for any number of workers."""
    parts, workers = _check("parts", parts, 1, vocab), _check("workers", workers, 1, 4096)
    if parts > 1 or workers > 1:
        parts = max(parts, workers)
        kw = dict(seed=seed, vocab=vocab, min_len=min_len, max_len=max_len)
        synth_keys(1, part=0, parts=parts, **kw)  # the arguments checked here, before any process starts
        sizes = part_sizes(n, vocab, parts)
        files = write_parts(path, _write_key_part, [(i, int(m), parts, kw) for i, m in enumerate(sizes) if m],
                            workers, progress, n, "synth keys")
        tokens = sum(pq.ParquetFile(f).metadata.row_group(g).column(0).num_values
                     for f in files for g in range(pq.ParquetFile(f).metadata.num_row_groups))
    else:
        keys = synth_keys(n, seed=seed, vocab=vocab, min_len=min_len, max_len=max_len)
        pq.write_table(pa.table({"key": keys}), path)
        tokens = int(np.diff(keys.offsets.to_numpy()).sum())
        files = [path]
    return {"path": str(path), "keys": n, "tokens": int(tokens), "mean_length": round(tokens / n, 3),
            "vocab": vocab, "seed": seed, "parts": len(files)}
