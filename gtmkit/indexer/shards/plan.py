"""Between a sharded build's phases: the catalog's global dictionaries merged from the files' own (the same
codes the single-process read gives), and the shards' ranges of SID prefixes.

A shard is a range [lo, hi) of keys first * V + second over the SIDs' first two tokens. A range starts at a
first token's beginning (key f * V) unless that token holds more rows than a shard should: such a hot token is
split between second tokens, so that its shards stay balanced (docs/design.md §3)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...formats.writes import save_npy, writing
from ..budget import physical_memory

# a single-process build's peak is ~365 bytes an ad (15M ads: 5.1 GiB); a shard's is its share of that
SHARD_BYTES_PER_AD = 400


def merge_dictionaries(results: list, n_attrs: int) -> tuple:
    """(per attribute the global dictionary, per attribute and file the remap of the file's codes to it).

    The single-process read numbers an attribute's allowed strings in the order the batches met them, then
    the strings only exclusions name in theirs; files are read in order, so the same order is the files'
    own lists concatenated, each string kept where first met."""
    dictionaries, remaps = [], []
    for j in range(n_attrs):
        index = {}
        for r in results:
            for s in r["met"][j][0]:
                index.setdefault(s, len(index))
        for r in results:
            for s in r["met"][j][1]:
                index.setdefault(s, len(index))
        dictionaries.append(list(index))
        remaps.append([np.fromiter((index[s] for s in r["dictionaries"][j]), np.int32, len(r["dictionaries"][j]))
                       for r in results])
    return dictionaries, remaps


def shard_count(rows: int, workers: int, memory_limit: int | None, row_bytes: int = SHARD_BYTES_PER_AD) -> int:
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


def save_dictionaries(stage, dictionaries: list, remaps: list) -> None:
    for j, d in enumerate(dictionaries):
        with writing(stage / f"dictionary{j}.parquet"):
            pq.write_table(pa.table({"value": pa.array(d, pa.string())}), stage / f"dictionary{j}.parquet")
        for i, r in enumerate(remaps[j]):
            save_npy(stage / f"remap{j}_{i:05d}.npy", r)


def load_dictionary(stage, j: int) -> list:
    return pq.read_table(stage / f"dictionary{j}.parquet").column("value").to_pylist()


def hot_tokens(token_rows: np.ndarray, shards: int, sid_length: int) -> list:
    """First tokens with more rows than an equal share of `shards` (none when SIDs have one token)."""
    if sid_length < 2 or shards < 2:
        return []
    return [int(f) for f in np.flatnonzero(token_rows > token_rows.sum() / shards)]


def shard_keys(token_rows: np.ndarray, second_rows: dict, shards: int) -> list:
    """Key bounds 0 = k_0 < ... < k_n = V * V of at most `shards` ranges with about equal rows, none empty.
    second_rows: {hot first token: rows by second token [V]}, whose tokens split between second tokens."""
    V = len(token_rows)
    keys, rows = [], []
    for f in range(V):
        if f in second_rows:
            keys.extend(f * V + np.arange(V))
            rows.extend(second_rows[f])
        else:
            keys.append(f * V)
            rows.append(token_rows[f])
    cells = shard_bounds(np.asarray(rows, np.int64), shards)
    return [int(keys[c]) for c in cells[:-1]] + [V * V]
