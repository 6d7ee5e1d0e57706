"""Array helpers used across the build: CSR offsets from lengths (numpy's cumsum is slow here)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _offsets(lengths, out):
    acc = 0
    out[0] = 0
    for i in range(lengths.shape[0]):
        acc += lengths[i]
        out[i + 1] = acc


def offsets_from_lengths(lengths: np.ndarray) -> np.ndarray:
    """int64 [n+1] CSR offsets: out[0] = 0, out[i+1] = lengths[0] + ... + lengths[i]."""
    out = np.empty(len(lengths) + 1, np.int64)
    _offsets(np.asarray(lengths), out)
    return out
