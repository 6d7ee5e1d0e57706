"""gtmkit._memory.prefetch (a hint: never changes results, never faults) and cpu.gtm.request_words (the nonzero
words a GTM test reads)."""

from __future__ import annotations

import numpy as np
from numba import njit

from gtmkit._memory import prefetch
from gtmkit.matcher.cpu.gtm import request_words


@njit(cache=True)
def _sum_with_prefetch(a, idx):
    s = 0
    for i in range(idx.shape[0]):
        prefetch(a, idx[i])
        prefetch(a, idx[i] + 10**12)  # far outside the array: a prefetch does not fault
    for i in range(idx.shape[0]):
        s += a[idx[i]]
    return s


@njit(cache=True)
def _rows_with_prefetch(m, rows):
    s = 0
    for r in rows:
        prefetch(m, r * m.shape[1])  # 2-D C array: row r starts at r * shape[1]
    for r in rows:
        s += m[r, 0]
    return s


def test_prefetch_changes_nothing():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 1000, 10_000)
    idx = rng.integers(0, len(a), 500)
    assert _sum_with_prefetch(a, idx) == a[idx].sum()
    m = rng.integers(0, 100, (300, 7))
    rows = rng.integers(0, 300, 50)
    assert _rows_with_prefetch(m, rows) == m[rows, 0].sum()
    assert _rows_with_prefetch(m[:, ::2], rows) == m[rows, 0].sum()  # strided view: compiles, does nothing


def test_request_words_lists_the_nonzero_words():
    rng = np.random.default_rng(1)
    B, A, W, Wb = 3, 4, 5, 4
    qbm = (rng.integers(0, 2**63, (B, A, W), dtype=np.uint64) * (rng.random((B, A, W)) < 0.4)).astype(np.uint64)
    sig_off = np.array([[0, 2, 5], [5, 5, 6], [6, 9, 9]], np.int64)
    sigs = (rng.integers(0, 2**63, (9, Wb), dtype=np.uint64) * (rng.random((9, Wb)) < 0.5)).astype(np.uint64)
    for b in range(B):
        out = request_words(qbm, sig_off, sigs, b)
        for a in range(A):
            o = a * (W + 1)
            assert out[o + 1:o + 1 + out[o]].tolist() == np.nonzero(qbm[b, a])[0].tolist()
        for j, sg in enumerate(range(sig_off[b, 0], sig_off[b, -1])):
            o = A * (W + 1) + j * (Wb + 1)
            assert out[o + 1:o + 1 + out[o]].tolist() == np.nonzero(sigs[sg])[0].tolist()
        assert len(out) == A * (W + 1) + (sig_off[b, -1] - sig_off[b, 0]) * (Wb + 1)
