"""The partitions of one trie level's nodes, as every build makes them (docs/design.md §3, phase 5)."""

from __future__ import annotations

import numpy as np

from ..inputs.schema import PartitionSpec
from .partition import level_partitions


def level_k(spec: PartitionSpec, depth: int) -> int:
    if depth == 0 or spec.mode == "none":
        return 1
    if spec.mode == "static":
        return spec.k[depth - 1]
    return spec.k_max


def level_parts(spec: PartitionSpec, d: int, trie, rows, sid_rows, sid_ad_offsets, rl) -> tuple:
    """(partitions a node, their union rows) of the trie's depth-d nodes: members are the SIDs' union rows
    below a node, a leaf's own ads at depth L (where k = 1 keeps the SID's union row itself)."""
    L, S = trie.unique_sids.shape[1], len(trie.unique_sids)
    if d == L and level_k(spec, d) == 1 and spec.mode != "dynamic":
        return np.ones(S, np.int64), sid_rows
    if d == L:
        return node_partitions(spec, d, rows, sid_ad_offsets[:-1], sid_ad_offsets[1:], rl)
    return node_partitions(spec, d, sid_rows, *trie.sid_ranges(d), rl)


def node_partitions(spec: PartitionSpec, d: int, M, lo, hi, rl) -> tuple:
    """level_partitions of depth-d nodes whose members are M[lo[i]:hi[i]], with the spec's k of that depth."""
    kd, dyn = level_k(spec, d), spec.mode == "dynamic" and d > 0
    return level_partitions(M, lo, hi, kd, dyn, spec.target_fill or 1.0, spec.k_max or 1, rl.n_bits)
