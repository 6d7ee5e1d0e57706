"""The SID->ad map and the ad index of an updated index in one merge (O(ads)): the index's rows are in (SID, ad id)
order already, so the changed ads, sorted, are inserted among them and the replaced rows dropped, with no sort of
every ad. Rows are then gathered from two sources: the index's (ids below N) and the changes' (N + i)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..._arrays import read_only
from ...threads import parallel_njit


@njit(cache=True, nogil=True)
def merge_plan(sid_ad_offsets, sid_ad_ids, removed, e_sid, e_id, order):
    """removed: the dropped rows, ascending; (e_sid, e_id)[order]: the entries to insert, ascending by (SID, id).
    -> (src int32 [N'], entry_row int64 [n], new_of_old int32 [N]): the source of each new row (a row of the
    index, or N + entry), each entry's new row, and each index row's new row (-1: dropped)."""
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
    src = np.empty(N - removed.shape[0] + n, np.int32)  # ads fit int32 (ad_rows_by_id is int32)
    entry_row = np.empty(n, np.int64)
    new_of_old = np.empty(N, np.int32)
    j = k = d = 0
    for r in range(N + 1):
        while k < n and before[k] <= r:
            src[j] = N + order[k]
            entry_row[order[k]] = j
            j += 1
            k += 1
        if r == N:
            break
        if d < removed.shape[0] and removed[d] == r:
            d += 1
            new_of_old[r] = -1
            continue
        src[j] = r
        new_of_old[r] = j
        j += 1
    return src, entry_row, new_of_old


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
    o_off, o_codes = (read_only(x) for x in old)
    c_off, c_codes = (read_only(x) for x in new)
    off = np.empty(len(src) + 1, np.int64)
    _lengths(o_off, c_off, src, off)
    out = np.empty(int(off[-1]), np.int32)
    _copy_lists(o_off, o_codes, c_off, c_codes, src, off, out)
    return off, out


@parallel_njit(cache=True)
def _moved_rows(rows_by_id, new_of_old, out):
    for i in prange(rows_by_id.shape[0]):
        out[i] = new_of_old[rows_by_id[i]]


@njit(cache=True, nogil=True)
def _merge_ids(sorted_ids, moved, fresh_ids, fresh_rows, out_ids, out_rows):
    i = j = k = 0
    while i < sorted_ids.shape[0] or j < fresh_ids.shape[0]:
        if j == fresh_ids.shape[0] or (i < sorted_ids.shape[0] and sorted_ids[i] < fresh_ids[j]):
            out_ids[k] = sorted_ids[i]
            out_rows[k] = moved[i]
            i += 1
        else:
            out_ids[k] = fresh_ids[j]
            out_rows[k] = fresh_rows[j]
            j += 1
        k += 1


def merge_id_lookup(sorted_ids, rows_by_id, new_of_old, edited_at, edited_rows, fresh_ids, fresh_rows):
    """The id lookup of the updated index: the index's ascending ids at their rows' new places (new_of_old),
    edited ads' entries (positions edited_at) at their new rows, and the new ads' ids (ascending) merged in.
    -> (ids int64, rows int32)."""
    moved = np.empty(len(sorted_ids), np.int32)
    _moved_rows(rows_by_id, new_of_old, moved)
    moved[edited_at] = edited_rows
    n = len(sorted_ids) + len(fresh_ids)
    out_ids, out_rows = np.empty(n, np.int64), np.empty(n, np.int32)
    _merge_ids(sorted_ids, moved, fresh_ids, fresh_rows.astype(np.int32), out_ids, out_rows)
    return out_ids, out_rows


@njit(cache=True, nogil=True)
def shift_offsets(off, removed, added_sids, out):
    """SID offsets after dropping rows `removed` (ascending) and adding rows to SIDs `added_sids` (ascending):
    out[s] = off[s] - dropped rows before SID s + added rows to SIDs before s. -> SIDs left without ads."""
    d = a = 0
    empty = 0
    for s in range(off.shape[0]):
        while d < removed.shape[0] and removed[d] < off[s]:
            d += 1
        while a < added_sids.shape[0] and added_sids[a] < s:
            a += 1
        out[s] = off[s] - d + a
        if s > 0 and out[s] == out[s - 1]:
            empty += 1
    return empty
