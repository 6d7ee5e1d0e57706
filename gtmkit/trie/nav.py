"""Navigation over the succinct trie's flat arrays (numba): child ranges, labels, find-child, lookup,
parents, key ids. `t` is a LoudsArrays; node ids are BFS ids, root 0; label entry j is node j+1."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from .._rank_select import get_bit, get_field, rank1, select0, select1


class LoudsArrays(NamedTuple):
    """The trie as flat arrays (n nodes, m keys); bit vectors are LSB-first uint64 words (nbits // 64 + 1).

    louds             uint64 [(2n+1)//64 + 1]  '10' then per node (BFS order) one 1 per child and a 0
    louds_rank        uint64 [S+1, 2]          rank9 directory (S = ceil(words/8) superblocks of 512 bits)
    louds_select0     uint32 [ceil((n+1)/512)+1]  superblock of every 512th zero; last = last superblock
    louds_select1     uint32 [ceil(n/512)+1]   superblock of every 512th one
    label_low         uint16 [n-1]             token & 0xFFFF of node j+1
    label_high        uint64 [(n-1)*h//64 + 1] token >> 16 of node j+1 in h = high_bits bits (h may be 0)
    high_bits         int                      bits of the largest token >> 16
    terminal          uint64 [n//64 + 1]       bit v: node v ends a key
    terminal_rank     uint64 [..., 2]          rank9 directory of terminal; key id of v = rank1(terminal, v)
    terminal_select1  uint32 [ceil(m/512)+1]   superblock of every 512th terminal
    level_offsets     int64 [D+2]              depth-d nodes are ids level_offsets[d] .. level_offsets[d+1]-1
    """

    louds: np.ndarray
    louds_rank: np.ndarray
    louds_select0: np.ndarray
    louds_select1: np.ndarray
    label_low: np.ndarray
    label_high: np.ndarray
    high_bits: int
    terminal: np.ndarray
    terminal_rank: np.ndarray
    terminal_select1: np.ndarray
    level_offsets: np.ndarray


_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True, nogil=True)
def next_zero(words, p):
    """Position of the first zero bit at or after p (callers know one exists: every node's run ends in one)."""
    w = p >> 6
    x = ~words[w] & (_ALL << np.uint64(p & 63))
    while x == 0:
        w += 1
        x = ~words[w]
    return w * 64 + np.int64(trailing_zeros(x))


@njit(cache=True, nogil=True)
def run_end(t, s, v):
    """Position of the zero that ends node v's run of ones (s = select0(v)): the next two words are scanned
    (nearly every node has fewer than 64 children), longer runs (the root of a large-vocabulary trie has
    up to millions) go through the select directory rather than word by word."""
    p = s + 1
    w = p >> 6
    if (~t.louds[w] & (_ALL << np.uint64(p & 63))) != 0 or ~t.louds[w + 1] != 0:
        return next_zero(t.louds, p)
    return select0(t.louds, t.louds_rank, t.louds_select0, v + 1)


@njit(cache=True, nogil=True)
def child_range(t, v):
    """(first, end): the children of node v are nodes first .. end-1 (first == end for a leaf)."""
    s = select0(t.louds, t.louds_rank, t.louds_select0, v)
    first = s - v
    return first, first + (run_end(t, s, v) - s - 1)


@njit(cache=True, nogil=True)
def first_child(t, v):
    """Id the first child of v has or would have; v may be n, giving n."""
    return select0(t.louds, t.louds_rank, t.louds_select0, v) - v


@njit(cache=True, nogil=True)
def has_children(t, v):
    return get_bit(t.louds, select0(t.louds, t.louds_rank, t.louds_select0, v) + 1) != 0


@njit(cache=True, nogil=True, inline="always")
def label(t, node):
    """Token on the edge into node (node >= 1)."""
    j = node - 1
    return np.int64(t.label_low[j]) | (get_field(t.label_high, j, t.high_bits) << 16)


@njit(cache=True, nogil=True)
def lower_bound(t, lo, hi, token):
    """First node in [lo, hi) (siblings, sorted by label) whose label is >= token."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if label(t, mid) < token:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def find_child(t, v, token):
    """Child of v along token, or -1."""
    first, end = child_range(t, v)
    c = lower_bound(t, first, end, token)
    if c < end and label(t, c) == token:
        return c
    return -1


@njit(cache=True, nogil=True, inline="always")
def is_terminal(t, v):
    return get_bit(t.terminal, v) != 0


@njit(cache=True, nogil=True)
def key_id(t, v):
    """Key id of terminal node v: terminals before v in BFS order."""
    return rank1(t.terminal, t.terminal_rank, v)


@njit(cache=True, nogil=True)
def parent(t, v):
    """Parent of node v >= 1: its LOUDS one sits after (parent + 1) zeros."""
    return select1(t.louds, t.louds_rank, t.louds_select1, v) - v - 1


@njit(cache=True, nogil=True)
def walk(t, tokens, a, b):
    """Node reached from the root along tokens[a:b], or -1."""
    v = 0
    for i in range(a, b):
        tok = tokens[i]
        if tok < 0 or tok > 2147483647:
            return -1
        v = find_child(t, v, tok)
        if v < 0:
            return -1
    return v


@njit(cache=True, nogil=True)
def lookup_many(t, tokens, offsets):
    """Key id of tokens[offsets[i]:offsets[i+1]] for each i, -1 where it is not a key -> int64 [m]."""
    m = offsets.shape[0] - 1
    out = np.full(m, -1, np.int64)
    for i in range(m):
        if offsets[i + 1] > offsets[i]:
            v = walk(t, tokens, offsets[i], offsets[i + 1])
            if v > 0 and is_terminal(t, v):
                out[i] = key_id(t, v)
    return out


@njit(cache=True, nogil=True)
def node_of_key(t, k):
    return select1(t.terminal, t.terminal_rank, t.terminal_select1, k)


@njit(cache=True, nogil=True)
def key_tokens(t, k, out):
    """Write key k's tokens into out[:depth] and return depth; out needs max-depth room."""
    v = node_of_key(t, k)
    d = 0
    while v > 0:
        out[d] = label(t, v)
        d += 1
        v = parent(t, v)
    out[:d] = out[:d][::-1].copy()
    return d


@njit(cache=True, nogil=True)
def subtree_keys(t, v, limit):
    """Key ids under node v (v itself included), ascending, at most limit -> int64 [<= limit].

    Per depth the subtree is a contiguous node range [lo, hi), so its keys are the contiguous ids
    [rank1(lo), rank1(hi)); the next depth's range is [first_child(lo), first_child(hi))."""
    total = 0
    lo, hi = v, v + 1
    k0s = np.empty(t.level_offsets.shape[0], np.int64)
    k1s = np.empty(t.level_offsets.shape[0], np.int64)
    d = 0
    while lo < hi and total < limit:
        k0 = key_id(t, lo)
        k1 = min(key_id(t, hi), k0 + limit - total)
        k0s[d], k1s[d] = k0, k1
        total += k1 - k0
        d += 1
        lo, hi = first_child(t, lo), first_child(t, hi)
    out = np.empty(total, np.int64)
    p = 0
    for i in range(d):
        for k in range(k0s[i], k1s[i]):
            out[p] = k
            p += 1
    return out


@njit(cache=True, nogil=True)
def labels_between(t, first, end):
    """int64 [end-first]: labels of nodes first .. end-1."""
    out = np.empty(end - first, np.int64)
    for c in range(first, end):
        out[c - first] = label(t, c)
    return out


@njit(cache=True, nogil=True)
def labels_of(t, nodes):
    """int64 [len(nodes)]: label of each node (nodes >= 1)."""
    out = np.empty(nodes.shape[0], np.int64)
    for i in range(nodes.shape[0]):
        out[i] = label(t, nodes[i])
    return out
