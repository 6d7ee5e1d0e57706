"""Navigation over the succinct trie's flat arrays (numba): child ranges, labels, find-child, lookup,
parents, key ids. `t` is a LoudsArrays or a PlainLoudsArrays; node ids are BFS ids, root 0; label entry j is node j+1.

The label functions are specialised by the tuple's type (numba compiles one version per type): a trie with
format 2's label layout is a PlainLoudsArrays and its search runs format 2's code on format 2's 11 fields. A
call that numba does not inline passes a tuple field by field, so every field it carries costs every call."""

from __future__ import annotations

import collections
import functools
from typing import NamedTuple

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import overload

from .._rank_select import get_bit, get_field, rank1, select0, select1
from .tails import TAIL_ARRAYS, no_tails


class LoudsArrays(NamedTuple):
    """The trie as flat arrays (n nodes, m keys); bit vectors are LSB-first uint64 words (nbits // 64 + 1).

    louds             uint64 [(2n+1)//64 + 1]  '10' then per node (BFS order) one 1 per child and a 0
    louds_rank        uint64 [S+1, 2]          rank9 directory (S = ceil(words/8) superblocks of 512 bits)
    louds_select0     uint32 [ceil((n+1)/512)+1]  superblock of every 512th zero; last = last superblock
    louds_select1     uint32 [ceil(n/512)+1]   superblock of every 512th one
    label_low         uint8/16 [c-1-t]         token & (2^low_bits - 1) of head node j+1, at j - rank1(label_tail, j)
    label_high        uint64 [(c-1-t)*h//64+1] token >> low_bits of the same, in h = high_bits bits (h may be 0)
    high_bits         int                      bits of the largest head token >> low_bits
    terminal          uint64 [n//64 + 1]       bit v: node v ends a key
    terminal_rank     uint64 [..., 2]          rank9 directory of terminal; key id of v = rank1(terminal, v)
    terminal_select1  uint32 [ceil(m/512)+1]   superblock of every 512th terminal
    level_offsets     int64 [D+2]              depth-d nodes are ids level_offsets[d] .. level_offsets[d+1]-1
    label_tail .. tail_high                    the t = tail_nodes labels of single-child chains (trie/tails.py)
    tail_nodes, tail_low_bits, tail_high_bits  int: t, the codes' base and escape widths
    level_label       int32 [K]                the token of every node of the K deepest levels (trie/labels.py)
    low_bits          int                      8 or 16: label_low's width
    const_from        int                      c: the first node of those levels (n when K = 0)
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
    label_tail: np.ndarray
    label_tail_rank: np.ndarray
    tail_dict: np.ndarray
    tail_low: np.ndarray
    tail_wide: np.ndarray
    tail_wide_rank: np.ndarray
    tail_high: np.ndarray
    tail_nodes: int
    tail_low_bits: int
    tail_high_bits: int
    level_label: np.ndarray
    low_bits: int
    const_from: int


@functools.lru_cache(maxsize=1)
def _no_tails() -> dict:
    """The tail store's arrays of a trie without tails (built on first use: no kernel runs at import)."""
    return no_tails()["arrays"]


FORMAT2_FIELDS = LoudsArrays._fields[:LoudsArrays._fields.index("level_offsets") + 1]  # format 2's, in its order


class PlainLoudsArrays(collections.namedtuple("PlainLoudsArrays", FORMAT2_FIELDS)):
    """A LoudsArrays whose labels all sit in 16-bit label_low / label_high (no tail store, no constant levels):
    format 2's fields only. The other LoudsArrays fields read as their empty values, in Python only."""

    __slots__ = ()
    tail_nodes = tail_low_bits = tail_high_bits = 0
    low_bits = 16

    @property
    def const_from(self) -> int:
        return int(self.level_offsets[-1])

    @property
    def level_label(self) -> np.ndarray:
        return np.zeros(0, np.int32)

    def __getattr__(self, name):  # the tail store's arrays: empty
        if name in TAIL_ARRAYS:
            return _no_tails()[name].copy()
        raise AttributeError(name)


def louds_arrays(**fields) -> "LoudsArrays | PlainLoudsArrays":
    """The kernels' tuple of a trie's arrays and counts (LoudsArrays' fields): a PlainLoudsArrays where the label
    layout is format 2's."""
    if not fields["tail_nodes"] and fields["low_bits"] == 16 and not len(fields["level_label"]):
        return PlainLoudsArrays(**{f: fields[f] for f in PlainLoudsArrays._fields})
    return LoudsArrays(**fields)


def _plain(t) -> bool:
    """Whether t (a value or a numba type) is a PlainLoudsArrays."""
    return "label_tail" not in (getattr(t, "fields", None) or getattr(t, "_fields", ()))


def all_fields(t) -> dict:
    """Every LoudsArrays field of t (either tuple) by name."""
    return {f: getattr(t, f) for f in LoudsArrays._fields}


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


@njit(cache=True, nogil=True)
def tail_label(t, j):
    """Label of tail node j+1 (label_tail bit j set): its code's dictionary token."""
    i = rank1(t.label_tail, t.label_tail_rank, j)
    c = get_field(t.tail_low, i, t.tail_low_bits)
    if t.tail_high_bits and get_bit(t.tail_wide, i):
        c |= get_field(t.tail_high, rank1(t.tail_wide, t.tail_wide_rank, i), t.tail_high_bits) << t.tail_low_bits
    return np.int64(t.tail_dict[c])


@njit(cache=True, nogil=True, inline="always")
def plain_head_label(t, h):
    """head_label() of a PlainLoudsArrays."""
    return np.int64(t.label_low[h]) | (get_field(t.label_high, h, t.high_bits) << 16)


@njit(cache=True, nogil=True, inline="always")
def tails_head_label(t, h):
    """head_label() of a LoudsArrays."""
    return np.int64(t.label_low[h]) | (get_field(t.label_high, h, t.high_bits) << t.low_bits)


def head_label(t, h):
    """Label entry h of label_low / label_high."""
    return (plain_head_label if _plain(t) else tails_head_label)(t, h)


@overload(head_label, inline="always", jit_options={"cache": True, "nogil": True})
def _head_label(t, h):
    if _plain(t):
        return lambda t, h: plain_head_label(t, h)
    return lambda t, h: tails_head_label(t, h)


def head_index(t, j):
    """Entry of label j in label_low / label_high (label j a head label)."""
    return j if not t.tail_nodes else j - int(rank1(t.label_tail, t.label_tail_rank, j))


@overload(head_index, inline="always", jit_options={"cache": True, "nogil": True})
def _head_index(t, j):
    if _plain(t):
        return lambda t, j: j

    def impl(t, j):
        if t.tail_nodes == 0:
            return j
        return j - rank1(t.label_tail, t.label_tail_rank, j)
    return impl


@njit(cache=True, nogil=True)
def const_label(t, node):
    """Label of a node of the constant deepest levels (node >= const_from): its level's token."""
    k = t.level_label.shape[0] - 1
    d = t.level_offsets.shape[0] - 2  # the deepest level
    while node < t.level_offsets[d]:
        d -= 1
        k -= 1
    return np.int64(t.level_label[k])


@njit(cache=True, nogil=True)
def tails_label(t, node):
    """label() of a LoudsArrays."""
    j = node - 1
    if node >= t.const_from:
        return const_label(t, node)
    if t.tail_nodes and get_bit(t.label_tail, j):
        return tail_label(t, j)
    return head_label(t, head_index(t, j))


@njit(cache=True, nogil=True, inline="always")
def plain_label(t, node):
    """label() of a PlainLoudsArrays."""
    j = node - 1
    return np.int64(t.label_low[j]) | (get_field(t.label_high, j, t.high_bits) << 16)


def label(t, node):
    """Token on the edge into node (node >= 1)."""
    return (plain_label if _plain(t) else tails_label)(t, node)


@overload(label, inline="always", jit_options={"cache": True, "nogil": True})
def _label(t, node):
    if _plain(t):
        return lambda t, node: plain_label(t, node)
    return lambda t, node: tails_label(t, node)


@njit(cache=True, nogil=True)
def tails_lower_bound(t, lo, hi, token):
    """lower_bound() of a LoudsArrays: siblings of two or more are head nodes with consecutive label entries,
    one rank for the range, none per probe."""
    if hi - lo == 1:
        return lo if tails_label(t, lo) >= token else hi
    if lo >= hi:
        return lo
    base = head_index(t, lo - 1) - lo
    while lo < hi:
        mid = (lo + hi) >> 1
        if head_label(t, base + mid) < token:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def plain_lower_bound(t, lo, hi, token):
    """lower_bound() of a PlainLoudsArrays."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if plain_label(t, mid) < token:
            lo = mid + 1
        else:
            hi = mid
    return lo


def lower_bound(t, lo, hi, token):
    """First node in [lo, hi) (siblings, sorted by label) whose label is >= token."""
    return (plain_lower_bound if _plain(t) else tails_lower_bound)(t, lo, hi, token)


@overload(lower_bound, jit_options={"cache": True, "nogil": True})
def _lower_bound(t, lo, hi, token):
    if _plain(t):
        return lambda t, lo, hi, token: plain_lower_bound(t, lo, hi, token)
    return lambda t, lo, hi, token: tails_lower_bound(t, lo, hi, token)


@njit(cache=True, nogil=True)
def tails_sibling_base(t, first, end):
    """sibling_base() of a LoudsArrays."""
    return head_index(t, first - 1) - first if end - first >= 2 else 0


def sibling_base(t, first, end):
    """b with label(node) == head_label(t, b + node) for the siblings first..end-1 when there are two or more (they
    are head nodes with consecutive entries: one rank for the range, none a label); 0 otherwise."""
    return 0 if _plain(t) else tails_sibling_base(t, first, end)


@overload(sibling_base, inline="always", jit_options={"cache": True, "nogil": True})
def _sibling_base(t, first, end):
    if _plain(t):
        return lambda t, first, end: 0
    return lambda t, first, end: tails_sibling_base(t, first, end)


@njit(cache=True, nogil=True)
def tails_sibling_label(t, base, first, end, node):
    """sibling_label() of a LoudsArrays."""
    if end - first >= 2:
        return tails_head_label(t, base + node)
    return tails_label(t, node)


def sibling_label(t, base, first, end, node):
    """label(t, node) of node in first..end-1, base = sibling_base(t, first, end)."""
    return plain_label(t, node) if _plain(t) else tails_sibling_label(t, base, first, end, node)


@overload(sibling_label, inline="always", jit_options={"cache": True, "nogil": True})
def _sibling_label(t, base, first, end, node):
    if _plain(t):
        return lambda t, base, first, end, node: plain_label(t, node)
    return lambda t, base, first, end, node: tails_sibling_label(t, base, first, end, node)


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
    """int64 [end-first]: labels of nodes first .. end-1 (siblings: heads with consecutive entries when two or more)."""
    out = np.empty(end - first, np.int64)
    if end - first == 1:
        out[0] = label(t, first)
        return out
    if end > first:
        base = head_index(t, first - 1)
        for c in range(first, end):
            out[c - first] = head_label(t, base + c - first)
    return out


@njit(cache=True, nogil=True)
def labels_of(t, nodes):
    """int64 [len(nodes)]: label of each node (nodes >= 1)."""
    out = np.empty(nodes.shape[0], np.int64)
    for i in range(nodes.shape[0]):
        out[i] = label(t, nodes[i])
    return out


@njit(cache=True, nogil=True)
def link_nodes(t):
    """Chains in the tail store: tail nodes whose parent is not one."""
    n = t.level_offsets[-1]
    count = 0
    for c in range(1, n):
        if get_bit(t.label_tail, c - 1) and not (get_bit(t.label_tail, parent(t, c) - 1)):
            count += 1
    return count
