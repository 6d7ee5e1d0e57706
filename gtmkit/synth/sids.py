"""Synthetic Semantic IDs: the ads-per-SID distribution and a Zipf-shaped SID tree."""

from __future__ import annotations


import numpy as np

from ..errors import GtmkitError
from ._hashing import _draw_cdf, _hash, _mix, _rng


# Ads per SID: 1 w.p. .82, 2 w.p. .09, 3..10 w.p. .079, 11..25 w.p. .011 (~k^-2.5 inside the two
# ranges): p50/p90/p99 = 1/2/11 (GRACE Table 1) with margins of >= 0.001 in the CDF, and mean ~1.52,
# so 45M ads hold ~30M SIDs.
_MAX_ADS_PER_SID = 25


def _ads_per_sid_pmf() -> np.ndarray:
    pmf = np.zeros(_MAX_ADS_PER_SID + 1)
    pmf[1], pmf[2] = 0.82, 0.09
    for lo, hi, mass in ((3, 10, 0.079), (11, 25, 0.011)):
        w = np.arange(lo, hi + 1, dtype=np.float64) ** -2.5
        pmf[lo:hi + 1] = mass * w / w.sum()
    return pmf / pmf.sum()


_ADS_PER_SID_PMF = _ads_per_sid_pmf()
_ADS_PER_SID_MEAN = float((_ADS_PER_SID_PMF * np.arange(_MAX_ADS_PER_SID + 1)).sum())

# SID tree shape. Token 1 ~ Zipf(0.6) over the vocab; a middle token ~ truncated Zipf over a per-prefix
# bijection of the vocab, truncated to a fan-out proportional to the prefix's expected SID count
# (so hot prefixes are bushy, cold ones thin); the last token is near-uniform. Measured with 10M SIDs
# at vocab 512, L=4: root 512 children; children of depth-1 nodes p10/p50/p90 75/137/390, of depth-2
# nodes 29/54/133 (p99 321), of depth-3 nodes mean 1.54. Fan-outs scale with the SID count, so
# smaller catalogs keep that shape in the lower levels.
_S_FIRST, _S_MID, _S_PENULT, _S_LAST = 0.6, 0.5, 0.3, 0.1
_LEAF_SLOT_SIDS = 0.8      # expected SIDs per fan-out slot of a last-prefix node
_MID_BRANCH = 125.0        # expected SIDs per slot grow by this factor per level above that
_FANOUT_JITTER = 0.5       # fan-out is multiplied by exp(+-this), per prefix
_SID_DRAW_BATCH = 1 << 22

# ---------------------------------------------------------------------------------------------------
# SIDs


def _tz_rank(u: np.ndarray, f, s: float) -> np.ndarray:
    """Truncated (continuous) Zipf: rank in [0, f) with P(rank r) ~ (r+1)^-s, by inverse CDF."""
    a = 1.0 - s
    x = (1.0 + u * ((f + 1.0) ** a - 1.0)) ** (1.0 / a)
    return np.minimum(x.astype(np.int64) - 1, np.asarray(f) - 1)


def _tz_pmf(r: np.ndarray, f, s: float) -> np.ndarray:
    a = 1.0 - s
    return ((r + 2.0) ** a - (r + 1.0) ** a) / ((f + 1.0) ** a - 1.0)


def _bijection(h: np.ndarray, rank: np.ndarray, vocab: int, units: np.ndarray) -> np.ndarray:
    """token = (rank * a + b) mod vocab with a a unit mod vocab: a permutation of the vocab per h."""
    a = units[(h >> np.uint64(8)) % np.uint64(len(units))]
    b = (h >> np.uint64(40)) % np.uint64(vocab)
    return ((rank.astype(np.uint64) * a + b) % np.uint64(vocab)).astype(np.int64)


def _units(vocab: int) -> np.ndarray:
    return np.flatnonzero(np.gcd(np.arange(vocab), vocab) == 1).astype(np.uint64)


def first_token_weights(seed: int, vocab: int) -> np.ndarray:
    """P(first SID token = t) of a catalog made with this seed and vocab, float64 [vocab]."""
    ranks = np.arange(vocab)
    tok = _bijection(_hash(seed, 0x51D0), ranks, vocab, _units(vocab))
    w = np.zeros(vocab)
    w[tok] = _tz_pmf(ranks, vocab, _S_FIRST)
    return w / w.sum()


def _draw_sids(m: int, rng: np.random.Generator, seed: int, vocab: int, L: int, n_target: int,
               units: np.ndarray) -> np.ndarray:
    """m SID draws (with repeats), int64 [m, L]."""
    toks = np.empty((m, L), np.int64)
    key = np.full(m, _hash(seed, 0x51D0)[0], np.uint64)   # level 0: one permutation per seed
    p = np.ones(m)
    for level in range(L):
        h = key if level == 0 else _mix(key ^ np.uint64(0x5EED + level))
        if level == 0:
            f, s = vocab, _S_FIRST
        elif level == L - 1:
            f, s = vocab, _S_LAST
        else:
            slot = _LEAF_SLOT_SIDS * _MID_BRANCH ** (L - 2 - level)
            jitter = np.exp(_FANOUT_JITTER * (2.0 * (h & np.uint64(0xFF)).astype(np.float64) / 255.0 - 1.0))
            f = np.clip(n_target * p * jitter / slot, min(2, vocab), vocab).astype(np.int64)
            s = _S_MID if level < L - 2 else _S_PENULT
        r = _tz_rank(rng.random(m), f, s)
        if level < L - 2:
            p *= _tz_pmf(r, f, s)
        t = _bijection(h, r, vocab, units)
        toks[:, level] = t
        key = _mix(key * np.uint64(0x100000001B3) + t.astype(np.uint64) + np.uint64(1))
    return toks


class _SidCodec:
    """Distinct SIDs kept as one int64 per SID (mixed radix) where vocab^L fits, else as rows."""

    def __init__(self, vocab: int, L: int):
        self.vocab, self.L = vocab, L
        self.packed = vocab ** L < 2 ** 62

    def encode(self, toks: np.ndarray) -> np.ndarray:
        if not self.packed:
            return np.ascontiguousarray(toks, np.int64).view(np.dtype((np.void, 8 * self.L))).ravel()
        key = np.zeros(len(toks), np.int64)
        for level in range(self.L):
            key = key * self.vocab + toks[:, level]
        return key

    def decode(self, keys: np.ndarray) -> np.ndarray:
        if not self.packed:
            return keys.view(np.int64).reshape(-1, self.L).astype(np.int32)
        out = np.empty((len(keys), self.L), np.int32)
        k = keys.copy()
        for level in range(self.L - 1, -1, -1):
            out[:, level] = k % self.vocab
            k //= self.vocab
        return out


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    a = np.sort(a)
    if len(a) == 0:
        return a
    keep = np.ones(len(a), bool)
    keep[1:] = a[1:] != a[:-1]
    return a[keep]


def _generate_sids(n_sids: int, seed: int, vocab: int, L: int) -> np.ndarray:
    """n_sids distinct SIDs in random order, as _SidCodec keys."""
    codec = _SidCodec(vocab, L)
    units = _units(vocab)
    pool = codec.encode(np.zeros((0, L), np.int64))
    for round_ in range(64):
        need = n_sids - len(pool)
        if need <= 0:
            break
        m = int(need * 1.08) + 256
        rng = _rng(seed, 1, round_)
        keys = [codec.encode(_draw_sids(min(_SID_DRAW_BATCH, m - i), rng, seed, vocab, L, n_sids, units))
                for i in range(0, m, _SID_DRAW_BATCH)]   # batches bound the temporaries' memory
        pool = _sorted_unique(np.concatenate([pool, *keys]))
    else:
        raise GtmkitError(f"could not draw {n_sids} distinct SIDs of {L} tokens over vocab {vocab}; "
                          "use a larger --vocab or --sid-length, or fewer ads")
    pick = _rng(seed, 2).permutation(len(pool))[:n_sids]
    return pool[pick]


def _ads_per_sid(n_ads: int, seed: int) -> np.ndarray:
    """int16 [n_sids] counts >= 1 summing to n_ads."""
    cdf = np.cumsum(_ADS_PER_SID_PMF)
    cdf[-1] = 1.0
    parts, total, round_ = [], 0, 0
    while total < n_ads:
        m = int((n_ads - total) / _ADS_PER_SID_MEAN * 1.02) + 64
        c = _draw_cdf(cdf, _rng(seed, 3, round_).random(m)).astype(np.int16)
        parts.append(c)
        total += int(c.sum(dtype=np.int64))
        round_ += 1
    counts = np.concatenate(parts)
    csum = np.cumsum(counts, dtype=np.int64)
    n_sids = int(np.searchsorted(csum, n_ads)) + 1
    counts = counts[:n_sids].copy()
    counts[-1] -= csum[n_sids - 1] - n_ads
    return counts


def ads_per_sid_stats(counts: np.ndarray) -> dict:
    """p50/p90/p99/max/mean of ads per SID (quantile = smallest v with P(X <= v) >= q)."""
    hist = np.bincount(counts)
    cdf = np.cumsum(hist) / len(counts)

    def q(x):
        return int(np.searchsorted(cdf, x - 1e-12))

    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": int(counts.max()),
            "mean": round(float(counts.mean()), 4)}
