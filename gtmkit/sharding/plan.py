"""How many shards a build takes and where their token ranges start: enough that one shard fits a worker's
memory, with about equal rows each (docs/design.md §3)."""

from __future__ import annotations

import math

import numpy as np

from .._machine import physical_memory


def shard_count(rows: int, workers: int, memory_limit: int | None, row_bytes: int) -> int:
    """Enough shards that one fits a worker's memory, and at least one a worker. memory_limit: a worker's
    bytes; None shares this machine's memory between the workers and the process that assembles. row_bytes:
    what a shard holds at its peak for one row (an ad; a trie build passes its own)."""
    if memory_limit is None:
        mem = physical_memory()
        memory_limit = mem // (workers + 1) if mem else None
    need = math.ceil(rows * row_bytes / memory_limit) if memory_limit else 1
    return max(1, workers, need)


def shard_bounds(token_rows: np.ndarray, shards: int) -> list:
    """Token bounds b_0 = 0 < b_1 < ... < b_n = V of at most `shards` ranges with about equal rows, none
    empty: the i-th cut lies before or after the token whose rows reach i equal shares, whichever is nearer (a
    token's rows stay in one range, so a token holding more than a share makes its range larger)."""
    V = len(token_rows)
    cum = np.cumsum(token_rows)
    total = int(cum[-1])
    bounds = [0]
    below = lambda b: int(cum[b - 1]) if b else 0  # noqa: E731  rows of tokens < b
    for s in range(1, shards):
        target = total * s / shards
        cross = int(np.searchsorted(cum, target, side="left"))  # the token whose rows reach the target
        # the cut before or after it, the nearer to the target first; a range may not be empty
        for b in sorted((cross, cross + 1), key=lambda b: abs(below(b) - target)):
            if bounds[-1] < b < V and below(b) > below(bounds[-1]):
                bounds.append(b)
                break
    bounds.append(V)
    # a last range without rows joins the one before it
    if len(bounds) > 2 and cum[-1] == cum[bounds[-2] - 1]:
        bounds.pop(-2)
    return bounds
