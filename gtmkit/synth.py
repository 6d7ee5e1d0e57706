"""Realistic synthetic ad catalogs and users (DESIGN §7): the inputs of tests, demos and benchmarks.

One deterministic `World` (countries, regions, cities, SID-cluster profiles) feeds both the catalog
(`synth_catalog` / `write_catalog`) and the users (`synth_users`), so targeting and users correlate."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Iterator, NamedTuple, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import GtmkitError
from .progress import Progress, report

GENERATOR = "gtmkit synth catalog"
AGE_BUCKETS = ("13-17", "18-24", "25-34", "35-44", "45-54", "55-64", "65+")
GENDERS = ("f", "m", "x")
# Real ISO codes first, by rough market size; the rest of the ~250 are synthetic two-letter codes.
REAL_COUNTRIES = ("US", "GB", "DE", "FR", "IN", "BR", "JP", "CA", "MX", "IT", "ES", "AU", "KR", "NL",
                  "TR", "ID", "PL", "SE", "CH", "BE", "AR", "SA", "ZA", "NG", "EG", "TH", "VN", "PH",
                  "MY", "SG")
N_COUNTRIES = 250
MAX_HOMES = 8              # home countries per SID cluster (first SID token)
HOME_REGIONS = 3           # home regions per home country of a cluster
ROWS_PER_GROUP = 1 << 20   # ads per generated chunk = Parquet row group (fixed: output must not depend on it)
_LUT_BITS = 10             # resolution of the country / region / city sampling tables

_COUNTRY_ZIPF = 1.1
_AGE_SHARE = np.array([0.06, 0.20, 0.24, 0.20, 0.14, 0.10, 0.06])
_N_HOMES_SHARE = np.array([0.25, 0.20, 0.15, 0.12, 0.10, 0.08, 0.06, 0.04])

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


@dataclass(frozen=True)
class TargetingRates:
    """The catalog's targeting knobs: shares of ads unless the help says otherwise.

    Defaults are calibrated (benchmarks/results/eval_1m.md) so that `gtmkit eval` on a 1M-SID
    catalog with peaked logits lands near GRACE's figures: CD-only ad-level pass rate ~23.5%
    (GRACE 23.55%), CD+GTM above GRACE's 40.42%. Most ads are broadly targeted (30% no country
    list, 55% no age range, 65% no gender, 70% no location strings below the country list), and
    half of the ads of a multi-ad SID share one campaign's targeting (sid_coherence): SID-sharing
    ads are near-identical creatives, and with independent targeting per ad a SID's matcher (the
    union of its ads) would pass almost any request, capping GTM's precision far below GRACE's."""

    untargeted_country: float = field(default=0.30, metadata={"help": "share of ads with no country list"})
    country_exclusion_rate: float = field(default=0.05, metadata={
        "help": "share of untargeted-country ads excluding 1..2 countries"})
    home_country_rate: float = field(default=0.90, metadata={
        "help": "share of targeted countries taken from the SID cluster's home countries"})
    untargeted_age: float = field(default=0.55, metadata={"help": "share of ads with no age range"})
    untargeted_gender: float = field(default=0.65, metadata={"help": "share of ads with no gender"})
    untargeted_location: float = field(default=0.70, metadata={"help": "share of ads with no location strings"})
    location_exclusion_rate: float = field(default=0.03, metadata={
        "help": "share of ads excluding one region or city"})
    null_rate: float = field(default=0.20, metadata={
        "help": "share of untargeted (or exclusion-free) rows stored as null rather than an empty list"})
    sid_coherence: float = field(default=0.50, metadata={
        "help": "share of the ads of a multi-ad SID that copy the SID's leader targeting (every column, "
                "exclusions included; one draw per SID): ads sharing a SID are near-identical, often "
                "one advertiser's campaign"})

    @classmethod
    def make(cls, rates: Optional["TargetingRates"] = None, **overrides) -> "TargetingRates":
        base = asdict(rates) if rates is not None else {}
        names = {f.name for f in fields(cls)}
        for k, v in overrides.items():
            if k not in names:
                raise GtmkitError(f"unknown synth knob '{k}' (known: {', '.join(sorted(names))})")
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
                raise GtmkitError(f"synth knob {k} must be a number in [0, 1], got {v!r}")
            base[k] = float(v)
        return cls(**base)


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


# ---------------------------------------------------------------------------------------------------
# the world


class Clusters(NamedTuple):
    """Per first SID token t1 (its "cluster"): where and whom its ads target.

    homes int32 [V, MAX_HOMES] (country index, -1 pad, first n_homes valid); n_homes int32 [V] (1..8);
    home_regions int32 [V, MAX_HOMES, HOME_REGIONS] (global region index inside homes[t1, j], -1 pad);
    age_centre float64 [V] (bucket index, -0.5..6.5); female_share float64 [V] (0.1..0.9)."""

    homes: np.ndarray
    n_homes: np.ndarray
    home_regions: np.ndarray
    age_centre: np.ndarray
    female_share: np.ndarray


class World:
    """Countries (popularity rank order, US first), regions and cities, and SID-cluster profiles.

    Deterministic from `seed`. Locations have global ids: countries [0, C), regions [C, C+R),
    cities [C+R, C+R+K); `location_strings[id]` is `US`, `US:R07` or `US:R07:C012`."""

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        rng = _rng(self.seed, 0x3057)
        synthetic = [a + b for a in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" for b in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     if a + b not in REAL_COUNTRIES]
        pick = rng.permutation(len(synthetic))[:N_COUNTRIES - len(REAL_COUNTRIES)]
        self.countries = REAL_COUNTRIES + tuple(synthetic[i] for i in pick)
        C = len(self.countries)
        w = np.arange(1, C + 1, dtype=np.float64) ** -_COUNTRY_ZIPF
        self.country_weights = w / w.sum()
        self.country_cdf = np.cumsum(self.country_weights)
        self.country_cdf[-1] = 1.0

        rank = np.arange(1, C + 1, dtype=np.float64)
        n_reg = np.clip(np.rint((2 + 48 * rank ** -0.5) * rng.uniform(0.75, 1.25, C)), 2, 50).astype(np.int64)
        n_reg[0] = 50
        self.region_country = np.repeat(np.arange(C), n_reg).astype(np.int32)
        self.region_offsets = np.r_[0, np.cumsum(n_reg)].astype(np.int64)
        R = len(self.region_country)
        region_local = np.arange(R) - self.region_offsets[self.region_country]
        max_city = 4 + 36 * (self.region_country + 1.0) ** -0.3
        n_city = np.clip(1 + np.floor(rng.random(R) * max_city), 1, 40).astype(np.int64)
        self.city_region = np.repeat(np.arange(R), n_city).astype(np.int32)
        self.city_offsets = np.r_[0, np.cumsum(n_city)].astype(np.int64)
        K = len(self.city_region)
        city_local = np.arange(K) - self.city_offsets[self.city_region]
        # unordered popularity inside a country / region (heavy-ish tailed, not by name; the floor
        # keeps every place above one sampling-table bucket)
        self.region_draw = _segment_cdf(self.region_country, rng.gamma(0.7, size=R) + 0.1)
        self.city_draw = _segment_cdf(self.city_region, rng.gamma(0.7, size=K) + 0.1)

        self.n_countries, self.n_regions, self.n_cities = C, R, K
        self.region_base, self.city_base = C, C + R
        cc = self.countries
        reg_names = [f"{cc[c]}:R{r:02d}" for c, r in zip(self.region_country.tolist(), region_local.tolist())]
        city_names = [f"{reg_names[r]}:C{k:03d}" for r, k in zip(self.city_region.tolist(), city_local.tolist())]
        self.location_strings = list(cc) + reg_names + city_names
        self._arrow = None
        self._clusters = {}
        self._build_luts()

    # -- sampling helpers (vectorised; u uniform [0, 1) of any shape). Draws go through lookup
    # tables of _LUT_BITS-bit quantiles: a per-ad binary search would dominate generation time.
    def _build_luts(self) -> None:
        qc = (np.arange(1 << 16) + 0.5) / (1 << 16)
        self._country_lut = np.searchsorted(self.country_cdf, qc, side="right").astype(np.int32)
        q = (np.arange(1 << _LUT_BITS) + 0.5) / (1 << _LUT_BITS)
        qs = (np.arange(self.n_countries)[:, None] + q[None, :]).ravel()
        self._region_lut = np.minimum(np.searchsorted(self.region_draw, qs, side="right"),
                                      np.repeat(self.region_offsets[1:] - 1, len(q))).astype(np.int32)
        qs = (np.arange(self.n_regions)[:, None] + q[None, :]).ravel()
        self._city_lut = np.minimum(np.searchsorted(self.city_draw, qs, side="right"),
                                    np.repeat(self.city_offsets[1:] - 1, len(q))).astype(np.int32)

    @staticmethod
    def _bucket(u, bits: int = _LUT_BITS) -> np.ndarray:
        return (np.asarray(u) * (1 << bits)).astype(np.int64)

    def draw_countries(self, u) -> np.ndarray:
        """Country index by popularity, same shape as u."""
        return self._country_lut[self._bucket(u, 16)]

    def draw_regions(self, country, u) -> np.ndarray:
        """Global region index inside `country` (broadcast with u) by region popularity."""
        return self._region_lut[(np.asarray(country) << _LUT_BITS) + self._bucket(u)]

    def draw_cities(self, region, u) -> np.ndarray:
        """Global city index inside `region` (broadcast with u) by city popularity."""
        return self._city_lut[(np.asarray(region) << _LUT_BITS) + self._bucket(u)]

    def arrow_dictionaries(self) -> dict:
        """pyarrow string arrays to `take` codes from: country, age, gender, location (global ids)."""
        if self._arrow is None:
            self._arrow = {"country": pa.array(self.countries, pa.string()),
                           "age": pa.array(AGE_BUCKETS, pa.string()),
                           "gender": pa.array(GENDERS, pa.string()),
                           "location": pa.array(self.location_strings, pa.string())}
        return self._arrow

    def clusters(self, vocab: int) -> Clusters:
        """Profiles of first tokens 0..vocab-1; the one of t1 depends only on (seed, t1)."""
        if vocab not in self._clusters:
            self._clusters[vocab] = self._make_clusters(vocab)
        return self._clusters[vocab]

    def _make_clusters(self, vocab: int) -> Clusters:
        t1 = np.arange(vocab, dtype=np.uint64)[:, None]
        s = self.seed + 0xC1A5

        def u(slot, shape=None):
            return _hash_uniform(s, t1, np.arange(shape).astype(np.uint64) * 64 + slot if shape else slot)

        want = _draw_cdf(np.cumsum(_N_HOMES_SHARE) / _N_HOMES_SHARE.sum(), u(1)[:, 0]) + 1
        cand = self.draw_countries(u(2, MAX_HOMES))                           # [V, 8]
        dup = _dups(cand, np.ones_like(cand, dtype=bool))
        order = np.argsort(dup, axis=1, kind="stable")
        cand = np.take_along_axis(cand, order, axis=1)
        n_homes = np.minimum(want, (~dup).sum(1)).astype(np.int32)
        homes = np.where(np.arange(MAX_HOMES) < n_homes[:, None], cand, -1).astype(np.int32)
        hu = _hash_uniform(s, t1[:, :, None], np.arange(MAX_HOMES * HOME_REGIONS, dtype=np.uint64)
                           .reshape(1, MAX_HOMES, HOME_REGIONS) + 3 * 64)
        hr = self.draw_regions(np.maximum(homes, 0)[:, :, None], hu)
        home_regions = np.where(homes[:, :, None] >= 0, hr, -1).astype(np.int32)
        age_centre = _draw_cdf(np.cumsum(_AGE_SHARE) / _AGE_SHARE.sum(), u(4)[:, 0]) + u(5)[:, 0] - 0.5
        female_share = 0.1 + 0.8 * u(6)[:, 0]
        return Clusters(homes, n_homes, home_regions, age_centre, female_share)


def _dups(mat: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """[n, w] bool: entry equals an earlier valid entry of its row (w is small: pairwise compare)."""
    dup = np.zeros(mat.shape, bool)
    for j in range(1, mat.shape[1]):
        for i in range(j):
            dup[:, j] |= valid[:, i] & (mat[:, i] == mat[:, j])
    return dup


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


# ---------------------------------------------------------------------------------------------------
# targeting


def _list_array(values: np.ndarray, counts: np.ndarray, dictionary: Optional[pa.Array],
                nulls: Optional[np.ndarray] = None) -> pa.ListArray:
    """list<...> column of len(counts) rows from flat codes (row-major) and per-row counts;
    codes are looked up in `dictionary` (pyarrow take) when given."""
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    vals = pa.array(values.astype(np.int32, copy=False))
    if dictionary is not None:
        vals = dictionary.take(vals)
    mask = pa.array(nulls) if nulls is not None and nulls.any() else None
    return pa.ListArray.from_arrays(pa.array(offsets), vals, mask=mask)


def _choose(cum: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.searchsorted(cum, u, side="right")


def _flat(k: np.ndarray):
    """For rows with k entries each: (row of each entry, position inside its row), int64 [sum(k)]."""
    row = np.repeat(np.arange(len(k)), k)
    start = np.cumsum(k) - k
    return row, np.arange(len(row)) - start[row]


def _first_in_row(vals: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """bool [m]: entry differs from the earlier entries of its row (rows are contiguous, <= width)."""
    keep = np.ones(len(vals), bool)
    for d in range(1, width):
        keep[d:] &= ~((vals[d:] == vals[:-d]) & (pos[d:] >= d))
    return keep


def _counts(ad: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(ad, minlength=n).astype(np.int64)


def _slot(u: np.ndarray, k: np.ndarray) -> np.ndarray:
    """floor(u * k) clamped to k - 1: a uniform slot among k (k >= 1)."""
    return np.minimum((u * k).astype(np.int64), k - 1)


_CUM_N_COUNTRY = np.cumsum([0.45, 0.25, 0.15, 0.10])      # 1..5 targeted countries
_CUM_N_EXCL = np.array([0.7])                              # 1..2 excluded countries
_CUM_AGE_WIDTH = np.cumsum([0.35, 0.35, 0.20])             # 1..4 buckets
_CUM_N_LOC = np.cumsum([0.6, 0.3])                         # 1..3 location strings
_CUM_LOC_LEVEL = np.cumsum([0.15, 0.45])                   # country / region / city
_HOME_REGION_RATE = 0.7                                    # a region inside a home country is a home region
_AGE_SPREAD = 0.8                                          # sd of an ad's age centre around its cluster's
_GENDER_X = 0.04


def _targeting(world: World, cl: Clusters, t1: np.ndarray, rng: np.random.Generator,
               r: TargetingRates) -> dict:
    """Targeting columns (pyarrow list arrays) of n ads whose first SID tokens are t1.

    Lists are built flat (one array entry per list element, rows contiguous) so the work follows
    the number of elements, not n * max width. A uniform u that decides one of two exclusive
    branches (np.where) is shared by both."""
    n = len(t1)
    dic = world.arrow_dictionaries()
    C, Rg = world.n_countries, world.n_regions
    homes = cl.homes.ravel()
    out = {}

    # country: 1..5 countries, mostly the cluster's homes
    u = rng.random(n)
    null_c = u < r.untargeted_country * r.null_rate
    tgt = np.flatnonzero(u >= r.untargeted_country)
    row, pos = _flat(1 + _choose(_CUM_N_COUNTRY, rng.random(len(tgt))))
    ad = tgt[row]
    tt = t1[ad]
    u = rng.random(len(ad))
    j = _slot(u, cl.n_homes[tt])
    from_home = rng.random(len(ad)) < r.home_country_rate
    cty = np.where(from_home, homes[tt * MAX_HOMES + j], world.draw_countries(u))
    keep = _first_in_row(cty, pos, 5)
    cty, hslot, c_ad = cty[keep], np.where(from_home, j, -1)[keep], ad[keep]
    n_cty = _counts(c_ad, n)
    c_off = np.cumsum(n_cty) - n_cty
    out["country"] = _list_array(cty, n_cty, dic["country"], null_c)

    exc = np.flatnonzero((n_cty == 0) & (rng.random(n) < r.country_exclusion_rate))
    row, pos = _flat(1 + _choose(_CUM_N_EXCL, rng.random(len(exc))))
    ex = world.draw_countries(rng.random(len(row)))
    keep = _first_in_row(ex, pos, 2)
    n_ex = _counts(exc[row[keep]], n)
    out["country_exclude"] = _list_array(ex[keep], n_ex, dic["country"],
                                         (n_ex == 0) & (rng.random(n) < r.null_rate))

    # age: a contiguous range of 1..4 buckets around the cluster's centre
    u = rng.random(n)
    null_a = u < r.untargeted_age * r.null_rate
    ta = np.flatnonzero(u >= r.untargeted_age)
    w = 1 + _choose(_CUM_AGE_WIDTH, rng.random(len(ta)))
    centre = cl.age_centre[t1[ta]] + rng.normal(0.0, _AGE_SPREAD, len(ta))
    lo = np.clip(np.rint(centre - (w - 1) / 2.0), 0, len(AGE_BUCKETS) - w).astype(np.int64)
    row, pos = _flat(w)
    n_age = np.zeros(n, np.int64)
    n_age[ta] = w
    out["age"] = _list_array(lo[row] + pos, n_age, dic["age"], null_a)

    # gender: one value following the cluster's lean
    u = rng.random(n)
    null_g = u < r.untargeted_gender * r.null_rate
    tg = u >= r.untargeted_gender
    v = rng.random(int(tg.sum()))
    g = np.where(v < _GENDER_X, 2, np.where((v - _GENDER_X) / (1 - _GENDER_X) < cl.female_share[t1[tg]], 0, 1))
    out["gender"] = _list_array(g, tg.astype(np.int64), dic["gender"], null_g)

    # location: 1..3 country/region/city strings inside the ad's countries (else its cluster's homes)
    u = rng.random(n)
    null_l = u < r.untargeted_location * r.null_rate
    tl = np.flatnonzero(u >= r.untargeted_location)
    row, pos = _flat(1 + _choose(_CUM_N_LOC, rng.random(len(tl))))
    ad = tl[row]
    lc, lhs = _ad_countries(cl, homes, cty, hslot, n_cty, c_off, ad, t1[ad], rng.random(len(ad)))
    level = _choose(_CUM_LOC_LEVEL, rng.random(len(ad)))
    loc = lc.astype(np.int64)
    sub = level > 0
    reg = _regions(world, cl, t1[ad[sub]], lc[sub], lhs[sub], rng)
    loc[sub] = C + reg
    city = level[sub] == 2
    loc[np.flatnonzero(sub)[city]] = C + Rg + world.draw_cities(reg[city], rng.random(int(city.sum())))
    keep = _first_in_row(loc, pos, 3)
    loc, l_ad = loc[keep], ad[keep]
    n_loc = _counts(l_ad, n)
    out["location"] = _list_array(loc, n_loc, dic["location"], null_l)

    # location exclusion: one region or city inside one of the ad's (or its cluster's) countries
    le = np.flatnonzero(rng.random(n) < r.location_exclusion_rate)
    lc, lhs = _ad_countries(cl, homes, cty, hslot, n_cty, c_off, le, t1[le], rng.random(len(le)))
    ereg = _regions(world, cl, t1[le], lc, lhs, rng)
    eloc = C + ereg
    ecity = rng.random(len(le)) < 0.5
    eloc[ecity] = C + Rg + world.draw_cities(ereg[ecity], rng.random(int(ecity.sum())))
    l_off = np.cumsum(n_loc) - n_loc
    clash = np.zeros(len(le), bool)
    for d in range(3):  # an ad never excludes a string it also allows
        has = n_loc[le] > d
        clash[has] |= loc[l_off[le[has]] + d] == eloc[has]
    n_le = np.zeros(n, np.int64)
    n_le[le[~clash]] = 1
    out["location_exclude"] = _list_array(eloc[~clash], n_le, dic["location"],
                                          (n_le == 0) & (rng.random(n) < r.null_rate))
    return out


def _ad_countries(cl, homes, cty, hslot, n_cty, c_off, ad, tt, u):
    """A country per entry of ads `ad`: one of the ad's targeted countries (flat cty, rows by
    c_off/n_cty), or a home of its cluster when untargeted; and its home slot (-1: not a home)."""
    nc = n_cty[ad]
    has = nc > 0
    j = _slot(u, cl.n_homes[tt])
    if not len(cty):
        return homes[tt * MAX_HOMES + j], j
    pick = np.where(has, c_off[ad] + _slot(u, np.maximum(nc, 1)), 0)
    return np.where(has, cty[pick], homes[tt * MAX_HOMES + j]), np.where(has, hslot[pick], j)


def _regions(world, cl, tt, country, home_slot, rng) -> np.ndarray:
    """A region per entry inside `country`: one of its cluster's home regions there (70% when the
    country is a home, home_slot >= 0), else one by popularity."""
    m = len(tt)
    u = rng.random(m)
    pop = world.draw_regions(country, u)
    hr = cl.home_regions.reshape(-1)[(tt * MAX_HOMES + np.maximum(home_slot, 0)) * HOME_REGIONS
                                      + _slot(u, HOME_REGIONS)]
    use_home = (home_slot >= 0) & (rng.random(m) < _HOME_REGION_RATE) & (hr >= 0)
    return np.where(use_home, hr, pop)


# ---------------------------------------------------------------------------------------------------
# catalog


ARROW_SCHEMA = pa.schema([
    ("ad_id", pa.int64()), ("sid", pa.list_(pa.int32())),
    ("country", pa.list_(pa.string())), ("country_exclude", pa.list_(pa.string())),
    ("age", pa.list_(pa.string())), ("gender", pa.list_(pa.string())),
    ("location", pa.list_(pa.string())), ("location_exclude", pa.list_(pa.string())),
])


@dataclass(frozen=True)
class _Plan:
    n_ads: int
    seed: int
    vocab: int
    sid_length: int
    world_seed: int
    rates: TargetingRates
    bloom_bits: int
    bloom_hashes: int
    bloom_seed: int


def _check_plan(n_ads, seed, vocab, sid_length, world_seed, rates, overrides, bloom_bits, bloom_hashes,
                bloom_seed) -> _Plan:
    def whole(name, v, lo, hi=2 ** 62):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= int(v) <= hi:
            raise GtmkitError(f"synth: {name} must be an integer in [{lo}, {hi}], got {v!r}")
        return int(v)

    plan = _Plan(whole("n_ads", n_ads, 1), whole("seed", seed, 0, 2 ** 32 - 1), whole("vocab", vocab, 2, 2 ** 31 - 1),
                 whole("sid_length", sid_length, 1, 64), whole("world_seed", world_seed, 0, 2 ** 32 - 1),
                 TargetingRates.make(rates, **overrides), whole("bloom_bits", bloom_bits, 64, 1 << 20),
                 whole("bloom_hashes", bloom_hashes, 1, 32), whole("bloom_seed", bloom_seed, 0, 2 ** 32 - 1))
    if plan.bloom_bits % 64:
        raise GtmkitError(f"synth: bloom_bits must be a multiple of 64, got {plan.bloom_bits}")
    expected_sids = plan.n_ads / _ADS_PER_SID_MEAN
    if expected_sids > 0.5 * float(plan.vocab) ** plan.sid_length:
        raise GtmkitError(f"synth: {plan.n_ads} ads need ~{expected_sids:.0f} distinct SIDs, more than half of "
                          f"vocab^sid_length = {plan.vocab}^{plan.sid_length}; raise --vocab or --sid-length")
    return plan


def _scramble40(x: np.ndarray, a: np.uint64, b: np.uint64) -> np.ndarray:
    """A bijection of [0, 2^40) (uint64 in, uint64 out): unique ids that look unordered."""
    mask = np.uint64((1 << 40) - 1)
    x = (x + (b >> np.uint64(24))) & mask
    for mul in (a, b):
        x = (x * mul) & mask
        x ^= x >> np.uint64(21)
    return x


class _Generation:
    """SIDs and ads->SID assignment of a plan; batches are made on demand (one row group each)."""

    def __init__(self, plan: _Plan, progress: Progress = None):
        self.plan = plan
        report(progress, 0, 3, "synth sids")
        self.counts = _ads_per_sid(plan.n_ads, plan.seed)
        self.codec = _SidCodec(plan.vocab, plan.sid_length)
        report(progress, 1, 3, "synth sids")
        self.sid_keys = _generate_sids(len(self.counts), plan.seed, plan.vocab, plan.sid_length)
        report(progress, 2, 3, "synth sids")
        ad_sid = np.repeat(np.arange(len(self.counts), dtype=np.int32), self.counts)
        _rng(plan.seed, 4).shuffle(ad_sid)
        self.ad_sid = ad_sid
        report(progress, 3, 3, "synth sids")
        self.world = World(plan.world_seed)
        self.clusters = self.world.clusters(plan.vocab)
        # ad ids: a bijection of the row number on [0, 2^40) (odd multiplies and xor-shifts), shifted
        h = _hash(plan.seed, 0xAD1D)[0]
        self._id_keys = (np.uint64(int(h) | 1), np.uint64(int(_hash(plan.seed, 0xAD1E)[0]) | 1))
        self._leader_cache = None

    @property
    def n_batches(self) -> int:
        return -(-self.plan.n_ads // ROWS_PER_GROUP)

    def batch(self, b: int) -> pa.Table:
        lo, hi = b * ROWS_PER_GROUP, min((b + 1) * ROWS_PER_GROUP, self.plan.n_ads)
        n, L = hi - lo, self.plan.sid_length
        rows = np.arange(lo, hi, dtype=np.uint64)
        ad_id = _scramble40(rows, *self._id_keys).astype(np.int64) + 10 ** 12
        toks = self.codec.decode(self.sid_keys[self.ad_sid[lo:hi]])
        sid = pa.ListArray.from_arrays(pa.array(np.arange(0, n * L + 1, L, dtype=np.int32)),
                                       pa.array(toks.ravel()))
        cols = _targeting(self.world, self.clusters, toks[:, 0].astype(np.int64),
                          _rng(self.plan.seed, 5, b), self.plan.rates)
        if self.plan.rates.sid_coherence > 0.0:
            cols = self._cohere(cols, self.ad_sid[lo:hi], _rng(self.plan.seed, 6, b))
        return pa.Table.from_arrays([pa.array(ad_id), sid] + [cols[name] for name in ARROW_SCHEMA.names[2:]],
                                    schema=ARROW_SCHEMA)

    def _leaders(self) -> tuple:
        """(rank int32 [n_sids]: row of the SID's leader profile, -1 for single-ad SIDs; leader
        targeting columns). One `_targeting` draw per SID holding >= 2 ads (a single ad copying its
        own leader would only swap one independent draw for another), made once, lazily, in chunks
        of ROWS_PER_GROUP SIDs, each from its own seeded generator."""
        if self._leader_cache is None:
            multi = self.counts > 1
            rank = np.cumsum(multi, dtype=np.int32) - 1
            rank[~multi] = -1
            lead_sids = np.flatnonzero(multi)
            del multi
            parts = {name: [] for name in ARROW_SCHEMA.names[2:]}
            for c, i in enumerate(range(0, len(lead_sids), ROWS_PER_GROUP)):
                t1 = self.codec.decode(self.sid_keys[lead_sids[i:i + ROWS_PER_GROUP]])[:, 0].astype(np.int64)
                cols = _targeting(self.world, self.clusters, t1, _rng(self.plan.seed, 7, c), self.plan.rates)
                for name, col in cols.items():
                    parts[name].append(col)
            empty = {name: pa.array([], ARROW_SCHEMA.field(name).type) for name in parts}
            self._leader_cache = (rank, {name: pa.concat_arrays(ch) if ch else empty[name]
                                         for name, ch in parts.items()})
        return self._leader_cache

    def _cohere(self, cols: dict, ad_sid: np.ndarray, rng: np.random.Generator) -> dict:
        """Ads of multi-ad SIDs take their SID's leader targeting (every column) with probability
        sid_coherence; the others keep their own draw."""
        rank, leaders = self._leaders()
        n = len(ad_sid)
        lead = rank[ad_sid]
        src = np.flatnonzero((rng.random(n) < self.plan.rates.sid_coherence) & (lead >= 0))
        if not len(src):
            return cols
        idx = np.arange(n, dtype=np.int64)
        idx[src] = n + np.arange(len(src))
        idx, lead = pa.array(idx), pa.array(lead[src])
        return {name: pa.concat_arrays([col, leaders[name].take(lead)]).take(idx) for name, col in cols.items()}

    def batches(self) -> Iterator[pa.Table]:
        for b in range(self.n_batches):
            yield self.batch(b)

    def schema(self) -> dict:
        p, world = self.plan, self.world
        meta = {"generator": GENERATOR, "ads": p.n_ads, "seed": p.seed, "world_seed": p.world_seed,
                "vocab": p.vocab, "sid_length": p.sid_length, "sids": len(self.counts),
                "ads_per_sid": ads_per_sid_stats(self.counts), **asdict(p.rates)}
        return {"ad_id": "ad_id",
                "sid": {"column": "sid", "length": p.sid_length, "vocab": p.vocab},
                "bitmask": {"country": {"column": "country", "exclude_column": "country_exclude",
                                        "domain": sorted(world.countries)},
                            "age": {"column": "age", "domain": sorted(AGE_BUCKETS)},
                            "gender": {"column": "gender", "domain": sorted(GENDERS)}},
                "bloom": {"location": {"column": "location", "exclude_column": "location_exclude",
                                       "bits": p.bloom_bits, "hashes": p.bloom_hashes, "seed": p.bloom_seed}},
                "meta": meta}


def synth_catalog(n_ads: int, seed: int = 0, vocab: int = 512, sid_length: int = 4, world_seed: int = 0,
                  rates: Optional[TargetingRates] = None, *, bloom_bits: int = 256, bloom_hashes: int = 3,
                  bloom_seed: int = 0, progress: Progress = None, **knobs) -> pa.Table:
    """A synthetic ad catalog of n_ads rows (columns: ARROW_SCHEMA), deterministic in its arguments.

    knobs: TargetingRates fields (e.g. untargeted_country=0.3) overriding `rates`. The matching
    schema dict is `catalog_schema(...)` with the same arguments (or what write_catalog writes)."""
    gen = _Generation(_check_plan(n_ads, seed, vocab, sid_length, world_seed, rates, knobs, bloom_bits,
                                  bloom_hashes, bloom_seed), progress)
    parts = []
    for b, t in enumerate(gen.batches()):
        parts.append(t)
        report(progress, min((b + 1) * ROWS_PER_GROUP, n_ads), n_ads, "synth catalog")
    return pa.concat_tables(parts)


def catalog_schema(n_ads: int, seed: int = 0, vocab: int = 512, sid_length: int = 4, world_seed: int = 0,
                   rates: Optional[TargetingRates] = None, *, bloom_bits: int = 256, bloom_hashes: int = 3,
                   bloom_seed: int = 0, **knobs) -> dict:
    """The schema dict (as written to `<stem>.schema.json`) of the catalog of these arguments.

    Redraws the SIDs (for the meta statistics) but none of the targeting."""
    return _Generation(_check_plan(n_ads, seed, vocab, sid_length, world_seed, rates, knobs, bloom_bits,
                                   bloom_hashes, bloom_seed)).schema()


def schema_path_for(catalog_path) -> Path:
    """`<stem>.schema.json` beside the catalog (stem: the file name without `.parquet`)."""
    p = Path(catalog_path)
    stem = p.name[: -len(".parquet")] if p.name.endswith(".parquet") else p.name
    return p.with_name(stem + ".schema.json")


def dumps_schema(schema: dict) -> str:
    """The schema file's text: sorted keys, so equal schemas give equal bytes."""
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


_PARQUET_OPTIONS = dict(compression="zstd", compression_level=3, use_dictionary=True, write_statistics=True,
                        version="2.6", data_page_version="1.0", store_schema=True)


def write_catalog(path, n_ads: int, seed: int = 0, vocab: int = 512, sid_length: int = 4, world_seed: int = 0,
                  rates: Optional[TargetingRates] = None, *, bloom_bits: int = 256, bloom_hashes: int = 3,
                  bloom_seed: int = 0, progress: Progress = None, **knobs) -> tuple:
    """Write the catalog (Parquet, one row group per ROWS_PER_GROUP ads) and `<stem>.schema.json` beside it.

    Returns (catalog_path, schema_path). Same arguments give byte-identical files; each file is
    written under a temporary name and renamed, so no half file is left under the final name."""
    plan = _check_plan(n_ads, seed, vocab, sid_length, world_seed, rates, knobs, bloom_bits, bloom_hashes,
                       bloom_seed)
    path = Path(path)
    schema_path = schema_path_for(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GtmkitError(f"{path.parent}: cannot create directory ({exc.strerror or exc})") from None
    gen = _Generation(plan, progress)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    schema_tmp = schema_path.with_name(f".{schema_path.name}.tmp{os.getpid()}")
    try:
        # generation (numpy) overlaps with encoding/compression (pyarrow, GIL released) of the previous batch
        with pq.ParquetWriter(str(tmp), ARROW_SCHEMA, **_PARQUET_OPTIONS) as writer, \
                ThreadPoolExecutor(max_workers=1) as pool:
            pending = None
            for b, table in enumerate(gen.batches()):
                if pending is not None:
                    pending.result()
                pending = pool.submit(writer.write_table, table, row_group_size=ROWS_PER_GROUP)
                report(progress, min((b + 1) * ROWS_PER_GROUP, plan.n_ads), plan.n_ads, "synth catalog")
            if pending is not None:
                pending.result()
        schema_tmp.write_text(dumps_schema(gen.schema()))
        os.replace(tmp, path)
        os.replace(schema_tmp, schema_path)
    except OSError as exc:
        raise GtmkitError(f"{path}: cannot write catalog ({exc.strerror or exc})") from None
    finally:
        for t in (tmp, schema_tmp):
            if t.exists():
                t.unlink()
    return str(path), str(schema_path)


# ---------------------------------------------------------------------------------------------------
# users


def synth_users(schema: dict, n: int, seed: int = 0) -> list:
    """n users drawn from the world of a synth catalog's schema (dict with meta from write_catalog).

    A user: {"country": "US", "age": "25-34", "gender": "f" (absent for ~10%), "location":
    ["US", "US:R07", "US:R07:C012"], "_interests": [t1, ...]}: 1..5 first SID tokens whose clusters
    have the user's country as a home (by token popularity; any token when none does). Keys starting
    with "_" are metadata the request encoder ignores."""
    meta = schema.get("meta") if isinstance(schema, dict) else None
    if not isinstance(meta, dict) or meta.get("generator") != GENERATOR or "world_seed" not in meta:
        raise GtmkitError("schema has no synth metadata (meta.generator == 'gtmkit synth catalog' with a world_seed):"
                          " users can only be drawn for catalogs written by `gtmkit synth catalog`")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise GtmkitError(f"synth users: n must be a non-negative integer, got {n!r}")
    try:
        world = World(int(meta["world_seed"]))
        vocab = int(meta.get("vocab", (schema.get("sid") or {}).get("vocab")))
        cat_seed = int(meta.get("seed", 0))
    except (TypeError, ValueError):
        raise GtmkitError("schema meta: world_seed, seed and vocab must be integers") from None
    cl = world.clusters(vocab)
    n = int(n)
    rng = _rng(seed, 0x05E7)
    country = world.draw_countries(rng.random(n))
    region = world.draw_regions(country, rng.random(n))
    city = world.draw_cities(region, rng.random(n))
    age = _draw_cdf(np.cumsum(_AGE_SHARE) / _AGE_SHARE.sum(), rng.random(n))
    no_gender = rng.random(n) < 0.10
    gender = np.where(rng.random(n) < 0.03, 2, (rng.random(n) < 0.5).astype(np.int64))
    n_int = 1 + _draw_cdf(np.cumsum([0.3, 0.25, 0.2, 0.15, 0.1]), rng.random(n))

    # clusters per home country, weighted by first-token popularity (segment-CDF draw)
    tw = first_token_weights(cat_seed, vocab)
    tok, slot = np.nonzero(cl.homes >= 0)
    hc = cl.homes[tok, slot]
    order = np.lexsort((tok, hc))
    hc, tok = hc[order], tok[order]
    seg = np.searchsorted(hc, np.arange(world.n_countries + 1))
    seg_cdf = _segment_cdf(hc, tw[tok] + 1e-12) if len(hc) else np.zeros(0)
    any_cdf = np.cumsum(tw)
    any_cdf[-1] = 1.0
    u = rng.random((n, 5))
    has = (seg[country + 1] > seg[country])[:, None]
    in_seg = np.minimum(np.searchsorted(seg_cdf, country[:, None] + u, side="right"),
                        np.maximum(seg[country + 1] - 1, 0)[:, None]) if len(hc) else np.zeros((n, 5), np.int64)
    interests = np.where(has, tok[in_seg] if len(hc) else 0, _draw_cdf(any_cdf, u))

    C, Rg = world.n_countries, world.n_regions
    names = world.location_strings
    users = []
    for i in range(n):
        c, rg, ct = int(country[i]), int(region[i]), int(city[i])
        user = {"country": names[c], "age": AGE_BUCKETS[age[i]]}
        if not no_gender[i]:
            user["gender"] = GENDERS[gender[i]]
        user["location"] = [names[c], names[C + rg], names[C + Rg + ct]]
        user["_interests"] = list(dict.fromkeys(interests[i, :n_int[i]].tolist()))
        users.append(user)
    return users


def write_users(path_or_stdout, users) -> int:
    """Write users as JSON lines (sorted keys) to a path or an open text stream; returns the count."""
    if hasattr(path_or_stdout, "write"):
        for u in users:
            path_or_stdout.write(json.dumps(u, sort_keys=True) + "\n")
        return len(users)
    try:
        with open(path_or_stdout, "w", encoding="utf-8", newline="\n") as f:
            return write_users(f, users)
    except OSError as exc:
        raise GtmkitError(f"{path_or_stdout}: cannot write users ({exc.strerror or exc})") from None


__all__ = ["World", "Clusters", "TargetingRates", "synth_catalog", "catalog_schema", "write_catalog",
           "synth_users", "write_users", "first_token_weights", "ads_per_sid_stats", "schema_path_for",
           "ARROW_SCHEMA", "AGE_BUCKETS", "GENDERS", "GENERATOR"]
