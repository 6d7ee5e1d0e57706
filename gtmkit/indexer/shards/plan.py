"""Between a sharded build's phases: the catalog's global dictionaries merged from the files' own (the same
sorted codes the single-process read gives), and the shards' ranges of SID prefixes.

A shard is a range [lo, hi) of keys first * V + second over the SIDs' first two tokens. A range starts at a
first token's beginning (key f * V) unless that token holds more rows than a shard should: such a hot token is
split between second tokens, so that its shards stay balanced (docs/design.md §3)."""

from __future__ import annotations

import numpy as np

from ...inputs.catalog import sorted_strings
from ...sharding.plan import shard_bounds

# a single-process build's peak is ~365 bytes an ad (15M ads: 5.1 GiB); a shard's is its share of that
SHARD_BYTES_PER_AD = 400


def merge_dictionaries(results: list, n_attrs: int) -> tuple:
    """(per attribute the global dictionary, per attribute and file the remap of the file's codes to it).

    The single-process read numbers an attribute's strings (allowed and excluded alike) in sorted order; a
    file's own dictionary is its strings sorted, so the global one is the union of the files' sorted again,
    whatever the files' order or the rows' order in them."""
    dictionaries, remaps = [], []
    for j in range(n_attrs):
        merged = sorted_strings(s for r in results for s in r["dictionaries"][j])
        code = {s: i for i, s in enumerate(merged)}
        dictionaries.append(merged)
        remaps.append([np.fromiter((code[s] for s in r["dictionaries"][j]), np.int32, len(r["dictionaries"][j]))
                       for r in results])
    return dictionaries, remaps


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
