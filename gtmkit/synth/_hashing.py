"""Counter-based hashing and sampling helpers of the synthetic world: values depend only on (seed, key)."""

from __future__ import annotations


import numpy as np



# ---------------------------------------------------------------------------------------------------
# counter-based hashing: values that must depend only on (seed, key) and not on draw order


_M1, _M2, _GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = x + _GOLD
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _hash(*parts) -> np.ndarray:
    h = np.zeros(1, np.uint64)
    for p in parts:
        h = _mix(h ^ np.asarray(p).astype(np.uint64))
    return h


def _hash_uniform(*parts) -> np.ndarray:
    """Uniform [0, 1) floats, a pure function of the integer parts (broadcast)."""
    return (_hash(*parts) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([int(k) & 0xFFFFFFFF for k in key])


def _draw_cdf(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)


def _segment_cdf(group: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """For items grouped contiguously by `group` (sorted): group + inclusive normalised cumsum inside
    the group, so `searchsorted(result, g + u, 'right')` draws an item of group g by weight."""
    out = np.empty(len(weights))
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    ends = np.r_[starts[1:], len(group)]
    for s, e in zip(starts, ends):  # one iteration per group (countries/regions), not per ad
        c = np.cumsum(weights[s:e])
        out[s:e] = c / c[-1]
        out[e - 1] = 1.0
    return out + group
