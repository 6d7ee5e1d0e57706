"""The synthetic world: countries (Zipf popularity), regions, cities and SID-cluster targeting profiles."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from ._hashing import _draw_cdf, _hash_uniform, _rng, _segment_cdf


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
