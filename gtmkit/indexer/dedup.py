"""Global row deduplication: an open-addressing hash table over uint64 rows, fed level by level.

Ids are assigned in first-seen order, so the table is deterministic for a given insertion order."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from .._bits import row_hash


@njit(cache=True, nogil=True)
def _insert(rows, slots, uniq, n_uniq, ids):
    mask = slots.shape[0] - 1
    W = rows.shape[1]
    for i in range(rows.shape[0]):
        pos = row_hash(rows[i]) & mask
        while True:
            s = slots[pos]
            if s < 0:
                for w in range(W):
                    uniq[n_uniq, w] = rows[i, w]
                slots[pos] = n_uniq
                ids[i] = n_uniq
                n_uniq += 1
                break
            same = True
            for w in range(W):
                if uniq[s, w] != rows[i, w]:
                    same = False
                    break
            if same:
                ids[i] = s
                break
            pos = (pos + 1) & mask
    return n_uniq


@njit(cache=True, nogil=True)
def _rehash(uniq, n_uniq, slots):
    mask = slots.shape[0] - 1
    for s in range(n_uniq):
        pos = row_hash(uniq[s]) & mask
        while slots[pos] >= 0:
            pos = (pos + 1) & mask
        slots[pos] = s


class RowDeduper:
    """add(rows [n, W] uint64) -> int32 ids into table() (uint64 [n_unique, W])."""

    def __init__(self, width: int):
        self.width = width
        self.n = 0
        self._uniq = np.zeros((0, width), np.uint64)
        self._slots = np.full(16, -1, np.int32)

    def add(self, rows: np.ndarray, chunk: int = 1 << 20) -> np.ndarray:
        rows = np.asarray(rows, np.uint64)
        ids = np.empty(len(rows), np.int32)
        # Chunks bound the worst-case growth: buffers track the distinct rows, not the rows offered.
        for a in range(0, len(rows), chunk):
            part = rows[a:a + chunk]
            self._reserve(self.n + len(part))
            self.n = _insert(part, self._slots, self._uniq, self.n, ids[a:a + chunk])
        return ids

    def _reserve(self, need: int) -> None:
        if need >= 2**31 - 1:
            raise ValueError("more than 2^31 distinct matcher rows")
        if need > len(self._uniq):
            grown = np.zeros((max(need, 2 * len(self._uniq)), self.width), np.uint64)
            grown[: self.n] = self._uniq[: self.n]
            self._uniq = grown
        if 2 * need > len(self._slots):
            self._slots = np.full(1 << (2 * need).bit_length(), -1, np.int32)
            _rehash(self._uniq, self.n, self._slots)

    def table(self) -> np.ndarray:
        return np.ascontiguousarray(self._uniq[: self.n])


def add_columns(dedupers: list, rows: np.ndarray, slices: list) -> list:
    """dedupers[t].add(rows[:, slices[t]]) for every table t, the tables in parallel threads
    (the numba inserts release the GIL; tables are independent)."""
    if len(dedupers) == 1:
        return [dedupers[0].add(rows[:, slices[0]])]
    with ThreadPoolExecutor(len(dedupers)) as ex:
        return list(ex.map(lambda t: dedupers[t].add(rows[:, slices[t]]), range(len(dedupers))))
