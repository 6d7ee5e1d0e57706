"""SID trie in CSR form, nodes numbered breadth-first (docs/design.md §3), built with vectorised NumPy.

Children of a node are contiguous and sorted by token, and child entry j is node j+1, so the
topology is just `node_offsets` + `child_tokens`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._arrays import offsets_from_lengths


@dataclass
class TrieBuild:
    """Result of build_trie.

    unique_sids:   int32 [S, L]      distinct SIDs, lexicographically sorted (sid index = leaf order)
    ad_sid:        int64 [N]         SID index of each input ad
    level_offsets: int64 [L+2]       nodes of depth d are ids level_offsets[d] .. level_offsets[d+1]-1
    node_offsets:  int32 [n_internal+1]  children of internal node n are entries node_offsets[n]..[n+1]-1
    child_tokens:  uint16|int32 [n_nodes-1]  token of entry j (= node j+1)
    level_starts:  list of int64 arrays, level_starts[d][i] = first SID index under the i-th depth-d node
    max_degree:    int64 [L]         largest out-degree among depth-d nodes, d = 0..L-1
    """

    unique_sids: np.ndarray
    ad_sid: np.ndarray
    level_offsets: np.ndarray
    node_offsets: np.ndarray
    child_tokens: np.ndarray
    level_starts: list
    max_degree: np.ndarray

    @property
    def num_sids(self) -> int:
        return len(self.unique_sids)

    @property
    def num_nodes(self) -> int:
        return int(self.level_offsets[-1])

    def sid_ranges(self, depth: int) -> tuple:
        """(lo, hi) int64 arrays: SID index range of every depth-d node."""
        starts = self.level_starts[depth]
        hi = np.empty_like(starts)
        hi[:-1] = starts[1:]
        hi[-1] = len(self.unique_sids)
        return starts, hi


def token_dtype(vocab: int):
    return np.uint16 if vocab <= 1 << 16 else np.int32


def sort_sids(sids: np.ndarray, vocab: int) -> tuple:
    """-> (unique sorted SIDs [S, L] int32, inverse [N] int64). Packs each SID into one uint64 when it fits."""
    n, L = sids.shape
    bits = max(1, int(vocab - 1).bit_length())
    if bits * L <= 63:
        key = np.zeros(n, np.uint64)
        for i in range(L):
            key <<= np.uint64(bits)
            key |= sids[:, i].astype(np.uint64)
        idx_bits = max(1, int(n - 1).bit_length())
        if bits * L + idx_bits <= 64:
            # Sorting (key, row) packed into one word: a plain sort, far faster than an argsort of the keys.
            packed = np.sort((key << np.uint64(idx_bits)) | np.arange(n, dtype=np.uint64))
            order = (packed & np.uint64((1 << idx_bits) - 1)).astype(np.int64)
            skey = packed >> np.uint64(idx_bits)
            del packed
        else:
            order = np.argsort(key)
            skey = key[order]
        new = np.empty(n, bool)
        new[0] = True
        np.not_equal(skey[1:], skey[:-1], out=new[1:])
    else:
        order = np.lexsort(sids.T[::-1])
        s = sids[order]
        new = np.empty(n, bool)
        new[0] = True
        np.any(s[1:] != s[:-1], axis=1, out=new[1:])
    group = offsets_from_lengths(new.view(np.uint8))[1:] - 1
    inverse = np.empty(n, np.int64)
    inverse[order] = group
    unique = sids[order[new]].astype(np.int32, copy=False)
    return np.ascontiguousarray(unique), inverse


def build_trie(sids: np.ndarray, vocab: int) -> TrieBuild:
    unique, inverse = sort_sids(sids, vocab)
    S, L = unique.shape
    # first_diff[i]: first position where SID i differs from SID i-1 (0 for the first SID).
    first_diff = np.zeros(S, np.int64)
    if S > 1:
        first_diff[1:] = np.argmax(unique[1:] != unique[:-1], axis=1)
    level_starts = [np.zeros(1, np.int64)]
    for d in range(1, L + 1):
        level_starts.append(np.flatnonzero(first_diff < d).astype(np.int64))
    counts = np.array([len(s) for s in level_starts], np.int64)
    level_offsets = np.zeros(L + 2, np.int64)
    np.cumsum(counts, out=level_offsets[1:])
    n_nodes = int(level_offsets[-1])
    if n_nodes >= 2**31:
        raise ValueError("trie has more than 2^31 nodes")
    n_internal = int(level_offsets[L])
    node_offsets = np.empty(n_internal + 1, np.int32)
    max_degree = np.zeros(L, np.int64)
    tokens = np.empty(n_nodes - 1, token_dtype(vocab))
    for d in range(L):
        # Every depth-d prefix starts where its first child starts: locate it among depth-(d+1) starts.
        first_child = level_offsets[d + 1] + np.searchsorted(level_starts[d + 1], level_starts[d])
        node_offsets[level_offsets[d]:level_offsets[d + 1]] = first_child - 1
        deg = np.diff(np.append(first_child, level_offsets[d + 2]))
        max_degree[d] = int(deg.max())
        tokens[level_offsets[d + 1] - 1:level_offsets[d + 2] - 1] = unique[level_starts[d + 1], d]
    node_offsets[-1] = n_nodes - 1
    return TrieBuild(unique, inverse, level_offsets, node_offsets, tokens, level_starts, max_degree)
