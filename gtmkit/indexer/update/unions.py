"""Growing the stored unions on a changed ad's path (docs/design.md §9): at every node from its leaf to the root,
the ad's row is ORed into the partition whose union gains the fewest bits (ties: the lowest), as a build places a
member. Copy-on-write: a union that grows becomes a new table row appended after the used ones and the slot is
repointed to it; rows already in the tables are never written, since dedup shares them between slots."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..._bits import popcount


@njit(cache=True, nogil=True)
def _parent(node_offsets, node):
    """The internal node whose child slots hold `node` (slot node - 1)."""
    a, z = 0, node_offsets.shape[0] - 1
    while z - a > 1:
        m = (a + z) >> 1
        if node_offsets[m] <= node - 1:
            a = m
        else:
            z = m
    return a


@njit(cache=True, nogil=True)
def _slots(node, jagged, part_offsets, level_offsets, level_base, level_width):
    """The node's partition slots [start, end) (fixed layouts may hold -1 padding there)."""
    if jagged:
        return part_offsets[node], part_offsets[node + 1]
    d = 0
    while level_offsets[d + 1] <= node:
        d += 1
    start = level_base[d] + (node - level_offsets[d]) * level_width[d]
    return start, start + level_width[d]


@njit(cache=True, nogil=True)
def _gain(row, lo, hi, table_row, n):
    """Bits of row[lo:hi] that table_row[:n] lacks (n = hi - lo)."""
    g = 0
    for w in range(n):
        g += np.int64(popcount(row[lo + w] & ~table_row[w]))
    return g


@njit(cache=True, nogil=True)
def grow_unions(leaves, rows, bm_words, bloom_starts, bloom_words, node_offsets, jagged, part_offsets, level_offsets,
                level_base, level_width, part_bm, part_bloom, bm_table, bm_used, bloom_table, bloom_base, bloom_used):
    """For each ad i (leaf leaves[i], combined row rows[i]): the unions on its path grown to hold it. bm_table /
    bloom_table have room after bm_used[0] / bloom_base[b] + bloom_used[b] rows (attribute b's rows start at
    bloom_base[b]; part_bloom holds ids relative to it). -> slots repointed."""
    nb = bloom_starts.shape[0]
    repointed = 0
    for i in range(leaves.shape[0]):
        row = rows[i]
        node = leaves[i]
        while True:
            start, end = _slots(node, jagged, part_offsets, level_offsets, level_base, level_width)
            best, best_gain = -1, 1 << 62
            for p in range(start, end):
                if part_bm[p] < 0:
                    continue
                g = _gain(row, 0, bm_words, bm_table[part_bm[p]], bm_words)
                for b in range(nb):
                    g += _gain(row, bloom_starts[b], bloom_starts[b] + bloom_words[b],
                               bloom_table[bloom_base[b] + part_bloom[p, b]], bloom_words[b])
                if g < best_gain:
                    best, best_gain = p, g
            if best >= 0 and best_gain > 0:
                repointed += 1
                old = bm_table[part_bm[best]]
                if _gain(row, 0, bm_words, old, bm_words) > 0:
                    u = bm_used[0]
                    for w in range(bm_words):
                        bm_table[u, w] = old[w] | row[w]
                    part_bm[best] = u
                    bm_used[0] = u + 1
                for b in range(nb):
                    lo, n = bloom_starts[b], bloom_words[b]
                    old = bloom_table[bloom_base[b] + part_bloom[best, b]]
                    if _gain(row, lo, lo + n, old, n) > 0:
                        u = bloom_used[b]
                        for w in range(n):
                            bloom_table[bloom_base[b] + u, w] = old[w] | row[lo + w]
                        part_bloom[best, b] = u
                        bloom_used[b] = u + 1
            if node == 0:
                break
            node = _parent(node_offsets, node)
    return repointed
