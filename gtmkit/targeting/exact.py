"""Exact ad-level eligibility (docs/design.md §2): the one numba kernel that both `Index.eligible_rows`
and the CPU post-filter (gtmkit/matcher/cpu/step.py) run; postfilter.cu is its CUDA twin."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from numba import njit, prange

from ..threads import parallel_njit
from .._bits import sorted_contains as _contains


def stack_lists(pairs: Sequence[tuple], n_rows: int) -> tuple:
    """Per-attribute CSR lists [(offsets [n_rows+1], codes)] -> (offsets int64 [nb, n_rows+1],
    codes int32 [nb, max nnz]) as `row_eligible` reads them (one attribute a row, zero padded)."""
    nb = len(pairs)
    if nb == 1 and len(pairs[0][1]):  # one attribute: its arrays as they are (no copy of an array per ad)
        o, c = pairs[0]
        return (np.ascontiguousarray(o, np.int64).reshape(1, n_rows + 1),
                np.ascontiguousarray(c, np.int32).reshape(1, -1))
    width = max([len(c) for _, c in pairs] + [1])
    off = np.zeros((max(nb, 1), n_rows + 1), np.int64)
    codes = np.zeros((max(nb, 1), width), np.int32)
    for b, (o, c) in enumerate(pairs):
        off[b] = o
        codes[b, :len(c)] = c
    return off, codes


def request_codes(bloom_codes: Sequence) -> tuple:
    """One request's Bloom dictionary codes -> (code_off int64 [1, nb+1], codes int64) as a one-request
    batch holds them."""
    parts = [np.asarray(c, np.int64) for c in bloom_codes]
    off = np.zeros((1, len(parts) + 1), np.int64)
    off[0, 1:] = np.cumsum([len(p) for p in parts])
    return off, (np.concatenate(parts) if parts else np.zeros(1, np.int64))


@njit(cache=True, nogil=True, inline="always")
def row_eligible(ad_bitmask, bmt, allow_off, allow_codes, excl_off, excl_codes, qbm, code_off, codes, b, r):
    """Whether ad row r admits request b: every bitmask attribute shares a bit with the request's, and
    for every Bloom attribute the ad is untargeted or allows one of the request's codes, and excludes
    none (codes < 0, strings no ad mentions, never match)."""
    bid = ad_bitmask[r]
    for a in range(qbm.shape[1]):
        hit = False
        for w in range(bmt.shape[1]):
            if bmt[bid, w] & qbm[b, a, w]:
                hit = True
                break
        if not hit:
            return False
    for k in range(code_off.shape[1] - 1):
        a0, a1 = allow_off[k, r], allow_off[k, r + 1]
        ok = a0 == a1
        for x in range(code_off[b, k], code_off[b, k + 1]):
            c = codes[x]
            if c >= 0 and not ok and _contains(allow_codes[k], a0, a1, c):
                ok = True
        if not ok:
            return False
        e0, e1 = excl_off[k, r], excl_off[k, r + 1]
        for x in range(code_off[b, k], code_off[b, k + 1]):
            c = codes[x]
            if c >= 0 and _contains(excl_codes[k], e0, e1, c):
                return False
    return True


@parallel_njit(cache=True)
def rows_eligible(rows, ad_bitmask, bmt, allow_off, allow_codes, excl_off, excl_codes, qbm, code_off, codes,
                  b, out):
    """out[i] = row_eligible(..., b, rows[i]); rows already checked to lie in [0, num_ads)."""
    for i in prange(rows.shape[0]):
        out[i] = row_eligible(ad_bitmask, bmt, allow_off, allow_codes, excl_off, excl_codes, qbm, code_off,
                              codes, b, rows[i])
