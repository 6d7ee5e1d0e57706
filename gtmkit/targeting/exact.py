"""Exact ad-level eligibility (docs/design.md §2) as numba kernels over the ad-level index."""

from __future__ import annotations

from numba import prange

from ..threads import parallel_njit
from .._bits import sorted_contains as _contains


@parallel_njit(cache=True)
def bitmask_ok(ad_rows, ad_bitmask_ids, table, req_bitmask, out):
    """out[i] &= for every attribute a: (table[ad_bitmask_ids[ad_rows[i]]] & req_bitmask[a]) != 0."""
    A, W = req_bitmask.shape
    for i in prange(ad_rows.shape[0]):
        if not out[i]:
            continue
        row = table[ad_bitmask_ids[ad_rows[i]]]
        for a in range(A):
            hit = False
            for w in range(W):
                if row[w] & req_bitmask[a, w]:
                    hit = True
                    break
            if not hit:
                out[i] = False
                break


@parallel_njit(cache=True)
def bloom_ok(ad_rows, allow_off, allow_codes, excl_off, excl_codes, req_codes, out):
    """out[i] &= (ad untargeted or allows a request code) and excludes no request code.

    Codes are sorted within each ad's list; request codes < 0 (strings no ad mentions) never match."""
    for i in prange(ad_rows.shape[0]):
        if not out[i]:
            continue
        r = ad_rows[i]
        a, b = allow_off[r], allow_off[r + 1]
        ok = a == b
        for c in req_codes:
            if c >= 0 and not ok and _contains(allow_codes, a, b, c):
                ok = True
        if ok:
            ea, eb = excl_off[r], excl_off[r + 1]
            for c in req_codes:
                if c >= 0 and _contains(excl_codes, ea, eb, c):
                    ok = False
                    break
        out[i] = ok
