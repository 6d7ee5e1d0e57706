"""Host side of the flat-step probe (benchmarks/kernels/flat_probe.cu), NumPy only: the probe's GPU driver
(probe_flat_step.py) and its CPU emulation test (tests/test_flat_probe_emu.py) rank and decode its passers here."""

from __future__ import annotations

import numpy as np

FB = 2048  # score bins (flat_probe.cu)


def unsortable(hi: np.ndarray) -> np.ndarray:
    """The float scores of composites' high words (the kernels' sortable(), inverted)."""
    hi = hi.astype(np.uint32)
    return np.where(hi & 0x80000000, hi & 0x7FFFFFFF, ~hi).astype(np.uint32).view(np.float32)


def window_bin(hist: np.ndarray, win: int) -> np.ndarray:
    """flat_plan's answer: per request, the first bin whose cumulative count reaches win (FB - 1 if none)."""
    cum = np.cumsum(hist, axis=1)
    return np.where(cum[:, -1] >= win, np.argmax(cum >= win, axis=1), FB - 1)


def decode(keys: np.ndarray, D: int, row0: int, row_j0: np.ndarray):
    """A request's ranked composites (flat_rank's topk) -> (child nodes, scores)."""
    keys = np.asarray(keys, np.uint64)
    idx = (0xFFFFFFFF - (keys & np.uint64(0xFFFFFFFF))).astype(np.int64)
    rows = row0 + idx // D
    return row_j0[rows] + idx % D + 1, unsortable(keys >> np.uint64(32))


def complete(hist_b: np.ndarray, thr_b: int, npass_b: int, k: int) -> bool:
    """Did the first window settle the request: k passers in it, or every candidate tested?"""
    return npass_b >= k or thr_b >= FB - 1 or not hist_b[thr_b + 1:].any()
