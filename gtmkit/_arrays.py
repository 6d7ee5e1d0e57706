"""Array helpers used across the build: CSR offsets from lengths (numpy's cumsum is slow here), read-only views."""

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


def read_only(a, dtype=None) -> np.ndarray:
    """np.asarray(a, dtype) as a read-only view: numba compiles a kernel once per argument type and read-only is
    part of an array's type, so inputs that may be maps of an artifact (read-only) or copies (writable) are passed
    read-only always, and each kernel compiles once."""
    a = np.asarray(a, dtype)
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v


def join_offsets(pieces: list) -> np.ndarray:
    """CSR offsets of lists pieces one after another: each piece's offsets (from any first value) shifted to
    continue where the previous piece ended."""
    out = np.zeros(sum(len(o) - 1 for o in pieces) + 1, np.int64)
    pos = 0
    for o in pieces:
        out[pos + 1:pos + len(o)] = np.asarray(o[1:]) - o[0] + out[pos]
        pos += len(o) - 1
    return out
