"""Targeting knobs and the vectorised per-ad targeting draw (correlated with SID clusters)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Optional

import numpy as np
import pyarrow as pa

from ..errors import GtmkitError
from .world import AGE_BUCKETS, HOME_REGIONS, MAX_HOMES, Clusters, World


@dataclass(frozen=True)
class TargetingRates:
    """The catalog's targeting knobs: shares of ads unless the help says otherwise.

    Defaults are calibrated (benchmarks/results/eval_cpu2.md) so that `gtmkit eval` on a 1M-SID
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
