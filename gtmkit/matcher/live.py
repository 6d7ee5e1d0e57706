"""Paused ads (docs/design.md §9): which ads are active, and how many active ads each trie node holds below it.

A pause only shrinks eligibility, so the stored unions stay safe; what changes at once is the post-filter (a
paused ad is never returned) and CD (a node with no active ad below it is pruned as if absent). Both read the
arrays kept here in place, so a call sees every pause made before it started."""

from __future__ import annotations

import threading

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def subtree_ad_counts(node_offsets, sid_ad_offsets, first_leaf, num_nodes):
    """int32 [num_nodes]: ads of the SIDs below each node (a leaf: its SID's). Children have larger BFS ids
    than their parent, so one pass from the last internal node up sums finished counts."""
    out = np.zeros(num_nodes, np.int32)
    for s in range(sid_ad_offsets.shape[0] - 1):
        out[first_leaf + s] = sid_ad_offsets[s + 1] - sid_ad_offsets[s]
    for n in range(node_offsets.shape[0] - 2, -1, -1):
        c = 0
        for j in range(node_offsets[n], node_offsets[n + 1]):
            c += out[j + 1]
        out[n] = c
    return out


@njit(cache=True, nogil=True)
def _set_rows(row_leaf, parent, rows, to_active, active, counts):
    """Set ad rows active (to_active) or paused; a row already so is left. Each change adds +-1 to the counts
    on its path from leaf to root (row_leaf: each row's leaf; parent: each node's, -1 at the root). -> rows
    changed."""
    changed = 0
    delta = 1 if to_active else -1
    for i in range(rows.shape[0]):
        r = rows[i]
        if (active[r] != 0) == to_active:
            continue
        active[r] = 1 if to_active else 0
        changed += 1
        node = row_leaf[r]
        while node >= 0:
            counts[node] += delta
            node = parent[node]
    return changed


class LiveAds:
    """Active flags by ad row (uint8 [N]) and active ads below each node (int32 [nodes]) of one index; the
    arrays are changed in place under a lock, so readers holding them see each change at their next read."""

    def __init__(self, index):
        self.index = index
        node_offsets = np.asarray(index.node_offsets, np.int64)
        sid_ad_offsets = np.asarray(index.sid_ad_offsets, np.int64)
        self.active = np.ones(index.num_ads, np.uint8)
        self.counts = subtree_ad_counts(node_offsets, sid_ad_offsets, index.first_leaf, index.num_nodes)
        # each row's leaf and each node's parent, so that a change walks its path by direct reads (a binary search
        # a level misses the cache all the way up); 4 bytes a row and a node
        self.row_leaf = np.repeat(np.arange(index.first_leaf, index.num_nodes, dtype=np.int32), np.diff(sid_ad_offsets))
        self.parent = np.empty(index.num_nodes, np.int32)
        self.parent[0] = -1
        self.parent[1:] = np.repeat(np.arange(len(node_offsets) - 1, dtype=np.int32), np.diff(node_offsets))
        self.num_paused = 0
        self.version = 0  # changes made: a cache of anything that depends on them (a root mask) keys on it
        self._lock = threading.Lock()

    def set_active(self, ad_ids, active: bool) -> int:
        """Resume (active) or pause the ads with these ids; unknown ids are refused before any change. -> ads
        whose state changed."""
        # RequestError names the first unknown id; rows in order: the writes then walk memory forward
        rows = np.sort(self.index.ad_rows(ad_ids))
        with self._lock:
            changed = _set_rows(self.row_leaf, self.parent, rows, bool(active), self.active, self.counts)
            self.num_paused += -changed if active else changed
            self.version += 1
        return int(changed)

    def paused_ids(self) -> np.ndarray:
        """int64: ids of the paused ads, ascending."""
        rows = np.flatnonzero(self.active == 0)
        return np.sort(np.asarray(self.index.sid_ad_ids, np.int64)[rows])
