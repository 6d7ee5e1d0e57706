"""Subtree-union matchers with k-way partitioning (GRACE §4.2).

A node's members are the SIDs under it (internal nodes) or its ads (leaves); each member's combined
row goes greedily to the partition whose union has the fewest set bits after adding it (smallest
post-union fill rate; ties to the lowest partition). Empty partitions are dropped."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..threads import parallel_njit
from .._arrays import offsets_from_lengths
from .._bits import popcount

N_CHUNKS = 512


@njit(cache=True, nogil=True)
def _greedy(M, a, b, k, P, pc, used, assign):
    """Assign members M[a:b] to k partitions; returns the summed set bits of the used partitions."""
    W = M.shape[1]
    for j in range(k):
        used[j] = False
        pc[j] = 0
        for w in range(W):
            P[j, w] = 0
    for m in range(a, b):
        best, bestc = 0, np.int64(1) << 62
        for j in range(k):
            c = 0
            for w in range(W):
                c += popcount(P[j, w] | M[m, w])
            if c < bestc:
                best, bestc = j, c
        for w in range(W):
            P[best, w] |= M[m, w]
        pc[best] = bestc
        used[best] = True
        assign[m] = best
    total = 0
    for j in range(k):
        if used[j]:
            total += pc[j]
    return total


@parallel_njit(cache=True)
def assign_partitions(M, lo, hi, k_fixed, dynamic, target_fill, k_max, n_bits, assign, counts):
    """For every node i (members M[lo[i]:hi[i]]): pick k, assign members, compact used partitions.

    Static: k = min(k_fixed, members). Dynamic: k = 1, 2, ... until the mean fill rate of the used
    partitions is <= target_fill or k reaches min(k_max, members).
    Writes assign[m] (partition of member m within its node) and counts[i] (partitions kept)."""
    n = lo.shape[0]
    W = M.shape[1]
    kcap = k_max if dynamic else k_fixed
    chunks = min(n, N_CHUNKS)
    for c in prange(chunks):
        P = np.empty((kcap, W), np.uint64)
        pc = np.empty(kcap, np.int64)
        used = np.empty(kcap, np.bool_)
        remap = np.empty(kcap, np.int64)
        for i in range(c * n // chunks, (c + 1) * n // chunks):
            m = hi[i] - lo[i]
            if dynamic:
                kk = 1
                while True:
                    total = _greedy(M, lo[i], hi[i], kk, P, pc, used, assign)
                    nused = 0
                    for j in range(kk):
                        nused += used[j]
                    if total <= target_fill * n_bits * nused or kk >= min(k_max, m):
                        break
                    kk += 1
            else:
                kk = min(k_fixed, m)
                if kk == 1:
                    for x in range(lo[i], hi[i]):
                        assign[x] = 0
                    counts[i] = 1
                    continue
                _greedy(M, lo[i], hi[i], kk, P, pc, used, assign)
            nused = 0
            for j in range(kk):
                remap[j] = nused
                nused += used[j]
            for x in range(lo[i], hi[i]):
                assign[x] = remap[assign[x]]
            counts[i] = nused


@parallel_njit(cache=True)
def emit_partitions(M, lo, hi, assign, part_offsets, out):
    """out[part_offsets[i] + assign[m]] = OR of node i's members in that partition."""
    n = lo.shape[0]
    W = M.shape[1]
    for i in prange(n):
        for m in range(lo[i], hi[i]):
            r = part_offsets[i] + assign[m]
            for w in range(W):
                out[r, w] |= M[m, w]


def level_partitions(M: np.ndarray, lo: np.ndarray, hi: np.ndarray, k: int = 1, dynamic: bool = False,
                     target_fill: float = 1.0, k_max: int = 1, n_bits: int = 1) -> tuple:
    """Partition matchers of one trie level.

    M: uint64 [n_members, W] member rows; node i owns members lo[i]:hi[i] (non-empty, ascending).
    Returns (counts int64 [n] partitions per node, rows uint64 [sum(counts), W] partition unions,
    node i's partitions being rows offsets[i]:offsets[i+1] with offsets = cumsum(counts))."""
    n = len(lo)
    assign = np.zeros(len(M), np.int8)
    counts = np.ones(n, np.int64)
    if dynamic or k > 1:
        assign_partitions(M, lo, hi, int(k), bool(dynamic), float(target_fill), int(k_max), int(n_bits),
                          assign, counts)
    offsets = offsets_from_lengths(counts)
    rows = np.zeros((int(offsets[-1]), M.shape[1]), np.uint64)
    emit_partitions(M, lo, hi, assign, offsets, rows)
    return counts, rows
