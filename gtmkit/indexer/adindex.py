"""SID->ad map and the exact ad-level index: ads grouped by SID, CSR string codes per Bloom attribute."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..threads import parallel_njit

@njit(cache=True, nogil=True)
def _group_stable(keys, n_keys, items, offsets, out):
    """Counting sort of items by keys[item], keeping the items' order within a key."""
    for i in items:
        offsets[keys[i] + 1] += 1
    for k in range(n_keys):
        offsets[k + 1] += offsets[k]
    pos = offsets[:-1].copy()
    for i in items:
        k = keys[i]
        out[pos[k]] = i
        pos[k] += 1


def _argsort_ids(ad_ids: np.ndarray) -> np.ndarray:
    """argsort of distinct ids; packs (id - min, row) into one word when it fits (a plain sort, far faster)."""
    n = len(ad_ids)
    lo, hi = int(ad_ids.min()), int(ad_ids.max())
    idx_bits = max(1, (n - 1).bit_length())
    if (hi - lo).bit_length() + idx_bits <= 64:
        packed = ((ad_ids - lo).astype(np.uint64) << np.uint64(idx_bits)) | np.arange(n, dtype=np.uint64)
        packed.sort()
        return (packed & np.uint64((1 << idx_bits) - 1)).astype(np.int64)
    return np.argsort(ad_ids)


def sid_ad_map(ad_sid: np.ndarray, ad_ids: np.ndarray, num_sids: int) -> tuple:
    """SID->ad map and the ad-id lookup, from one sort of the ad ids (ids are unique).

    Returns order int64 [N] (catalog rows grouped by SID, ascending ad id within a SID),
    sid_ad_offsets int64 [S+1], sid_ad_ids int64 [N], ad_ids_sorted int64 [N] and
    ad_rows_by_id int32 [N] (ad-level row of the i-th smallest ad id)."""
    by_id = _argsort_ids(ad_ids)
    offsets = np.zeros(num_sids + 1, np.int64)
    order = np.empty(len(ad_ids), np.int64)
    _group_stable(ad_sid, num_sids, by_id, offsets, order)
    row_of = np.empty(len(ad_ids), np.int32)
    row_of[order] = np.arange(len(ad_ids), dtype=np.int32)
    return order, offsets, ad_ids[order], ad_ids[by_id], row_of[by_id]


@njit(cache=True, nogil=True)
def _gather_lengths(off, order, out):
    for i in range(order.shape[0]):
        out[i + 1] = out[i] + (off[order[i] + 1] - off[order[i]])


@parallel_njit(cache=True)
def _gather_sorted(off, codes, order, new_off, out):
    """Row i of the result = sorted distinct codes of input row order[i] (duplicates become -1 at the
    end, then trimmed by the caller's second pass)."""
    for i in prange(order.shape[0]):
        a, b = off[order[i]], off[order[i] + 1]
        dst = new_off[i]
        for j in range(b - a):
            out[dst + j] = codes[a + j]
        out[dst:dst + (b - a)].sort()


@njit(cache=True, nogil=True)
def _dedupe_rows(off, codes, new_off, out):
    k = 0
    for i in range(off.shape[0] - 1):
        new_off[i] = k
        prev = -1
        for j in range(off[i], off[i + 1]):
            if codes[j] != prev:
                out[k] = codes[j]
                k += 1
                prev = codes[j]
    new_off[off.shape[0] - 1] = k
    return k


def reorder_lists(offsets: np.ndarray, codes: np.ndarray, order: np.ndarray) -> tuple:
    """CSR lists permuted to `order`, each list sorted ascending without repeats.

    Shapes: offsets int64 [n+1], codes int32 [nnz], order int64 [n] -> (int64 [n+1], int32 [nnz'])."""
    off = np.zeros(len(order) + 1, np.int64)
    _gather_lengths(offsets, order, off)
    tmp = np.empty(int(off[-1]), np.int32)
    _gather_sorted(offsets, codes, order, off, tmp)
    new_off = np.empty_like(off)
    out = np.empty_like(tmp)
    k = _dedupe_rows(off, tmp, new_off, out)
    return new_off, out[:k].copy()
