"""The SID->ad map and the ad index of an updated index in one merge (O(ads)): the index's rows are in (SID, ad id)
order already, so the changed ads, sorted, are inserted among them and the replaced rows dropped, with no sort of
every ad. Rows are then gathered from two sources: the index's (ids below N) and the changes' (N + i)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ...threads import parallel_njit


@njit(cache=True, nogil=True)
def merge_plan(sid_ad_offsets, sid_ad_ids, removed, e_sid, e_id, order):
    """removed: the dropped rows, ascending; (e_sid, e_id)[order]: the entries to insert, ascending by (SID, id).
    -> (src int64 [N'], final_row int64 [N + n]): the source of each new row (a row of the index, or N + entry),
    and the new row of each source (-1 for a dropped row)."""
    N = sid_ad_ids.shape[0]
    n = order.shape[0]
    before = np.empty(n, np.int64)  # the index row each entry goes in front of
    for k in range(n):
        e = order[k]
        s = e_sid[e]
        lo, hi = sid_ad_offsets[s], sid_ad_offsets[s + 1]
        while lo < hi:  # first row of the SID with a larger id
            mid = (lo + hi) >> 1
            if sid_ad_ids[mid] <= e_id[e]:
                lo = mid + 1
            else:
                hi = mid
        before[k] = lo
    src = np.empty(N - removed.shape[0] + n, np.int64)
    final_row = np.full(N + n, -1, np.int64)
    j = k = d = 0
    for r in range(N + 1):
        while k < n and before[k] <= r:
            src[j] = N + order[k]
            final_row[N + order[k]] = j
            j += 1
            k += 1
        if r == N:
            break
        if d < removed.shape[0] and removed[d] == r:
            d += 1
            continue
        src[j] = r
        final_row[r] = j
        j += 1
    return src, final_row


@parallel_njit(cache=True)
def gather_rows(old, new, src, out):
    """out[i] = old[src[i]], or new[src[i] - len(old)] for a change's row."""
    N = old.shape[0]
    for i in prange(src.shape[0]):
        s = src[i]
        out[i] = old[s] if s < N else new[s - N]


@njit(cache=True, nogil=True)
def _lengths(o_off, c_off, src, out):
    N = o_off.shape[0] - 1
    out[0] = 0
    for i in range(src.shape[0]):
        s = src[i]
        n = o_off[s + 1] - o_off[s] if s < N else c_off[s - N + 1] - c_off[s - N]
        out[i + 1] = out[i] + n


@parallel_njit(cache=True)
def _copy_lists(o_off, o_codes, c_off, c_codes, src, off, out):
    N = o_off.shape[0] - 1
    for i in prange(src.shape[0]):
        s = src[i]
        dst = off[i]
        if s < N:
            for j in range(o_off[s], o_off[s + 1]):
                out[dst + j - o_off[s]] = o_codes[j]
        else:
            c = s - N
            for j in range(c_off[c], c_off[c + 1]):
                out[dst + j - c_off[c]] = c_codes[j]


def gather_lists(old: tuple, new: tuple, src: np.ndarray) -> tuple:
    """CSR lists (offsets, codes) of the rows src names, from the index's lists and the changes' (as they are:
    both are sorted and distinct already)."""
    o_off, o_codes = (np.asarray(x) for x in old)
    c_off, c_codes = (np.asarray(x) for x in new)
    off = np.empty(len(src) + 1, np.int64)
    _lengths(o_off, c_off, src, off)
    out = np.empty(int(off[-1]), np.int32)
    _copy_lists(o_off, o_codes, c_off, c_codes, src, off, out)
    return off, out
