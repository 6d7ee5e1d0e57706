"""How many shards a build takes and where their token ranges start: enough that one shard, beside what the workers
hold between phases, fits a worker's memory, in whole waves of the workers, with about equal rows each
(docs/design.md §3)."""

from __future__ import annotations

import logging
import math

import numpy as np

from .._machine import physical_memory

log = logging.getLogger(__name__)

MIN_SHARD_ROWS = 100_000  # below this a shard's tasks cost more than its memory saves


def shard_count(rows: int, workers: int, memory_limit: int | None, row_bytes: int, held_bytes: int = 0) -> int:
    """The fewest shards, a multiple of the workers, such that a shard of rows/n rows at row_bytes a row (its peak:
    an ad's, or a key's in a trie build) plus a worker's share of held_bytes fits memory_limit; shards of
    MIN_SHARD_ROWS rows at the smallest.

    memory_limit: a worker's bytes; None shares this machine's memory between the workers and the process that
    assembles. held_bytes: what the workers hold in memory while the shards run (the split pieces, where they are
    task results and not files), an equal share each. Where that leaves no room for the smallest shards (the pieces
    about fill the cluster's memory), shards are the smallest and a warning suggests --staging: the pieces will
    spill to the workers' disks."""
    workers = max(1, workers)
    if memory_limit is None:
        mem = physical_memory()
        memory_limit = mem // (workers + 1) if mem else None
    if not memory_limit:
        return workers
    most = -(-rows // MIN_SHARD_ROWS) or 1
    room = memory_limit * workers - held_bytes  # the room beside a worker's share of the pieces, times the workers
    need = -(-rows * row_bytes * workers // room) if room > 0 else math.inf  # ceil(rows * row_bytes / a worker's room)
    if need > most:
        if held_bytes:
            log.warning("the pieces held between phases (%.1f GiB) leave the workers (%d x %.1f GiB) too little memory "
                        "for shards: they will spill to the workers' disks; --staging (staging=) keeps them in files "
                        "every worker reaches instead", held_bytes / 2**30, workers, memory_limit / 2**30)
        need = most
    return workers * -(-max(1, need) // workers)  # whole waves


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
