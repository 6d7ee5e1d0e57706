"""Vectorised builder of the succinct trie: sort and deduplicate keys, number nodes breadth-first
(children sorted by token), then lay out LOUDS bits, labels and terminal flags (gtmkit/trie/trie.py)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import GtmkitError
from ..progress import Progress, report
from .._rank_select import rank_directory, select_samples
from ..artifact.trie_format import MAX_NODES
from .labels import encode_labels, whole

LEN_BITS = 24  # a sort record is start << 24 | length: keys up to 2^24-1 tokens, 2^40 tokens in all
_LEN_MASK = np.uint64((1 << LEN_BITS) - 1)


@njit(cache=True, nogil=True)
def _split_pass(records, tokens, j, n_act, ib, out):
    """Keys shorter than j+1 go to the front of `out` in their current order; the others get sort words
    (token j << ib | their rank among the others) -> (words uint64 [n_act], records uint64 [n_act])."""
    words = np.empty(n_act, np.uint64)
    act = np.empty(n_act, np.uint64)
    r = 0
    a = 0
    uj = np.uint64(j)
    for i in range(records.shape[0]):
        x = records[i]
        if (x & _LEN_MASK) > uj:
            words[a] = (np.uint64(tokens[(x >> np.uint64(LEN_BITS)) + uj]) << np.uint64(ib)) | np.uint64(a)
            act[a] = x
            a += 1
        else:
            out[r] = x
            r += 1
    return words, act


@njit(cache=True, nogil=True)
def _gather_sorted(words, act, ib, out, base):
    mask = (np.uint64(1) << np.uint64(ib)) - np.uint64(1)
    for i in range(words.shape[0]):
        out[base + i] = act[words[i] & mask]


def sorted_records(tokens: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """uint64 [m]: (start << 24 | length) of every key, in lexicographic order (a key sorts before the
    keys it prefixes).

    LSD over token positions, last to first. A pass is a stable sort of the keys that have that position,
    by that token: one numpy sort of (token << b | rank) words, several times faster than any argsort;
    shorter keys go first in their current order. Records travel with the sort (no key-index
    indirection), so a pass makes two random reads per key: its token and its record."""
    lengths = np.diff(offsets)
    if int(lengths.max()) >= 1 << LEN_BITS or int(offsets[-1]) >= 1 << (64 - LEN_BITS):
        raise GtmkitError(f"keys: a key has {int(lengths.max())} tokens or there are {int(offsets[-1])} "
                          f"tokens in all, more than this builder takes (2^{LEN_BITS}-1, 2^{64 - LEN_BITS})")
    records = (offsets[:-1].astype(np.uint64) << np.uint64(LEN_BITS)) | lengths.astype(np.uint64)
    longer = np.bincount(lengths, minlength=int(lengths.max()) + 1)[::-1].cumsum()[::-1]  # keys with len >= d
    out = np.empty_like(records)
    for j in range(int(lengths.max()) - 1, -1, -1):
        n_act = int(longer[j + 1])
        ib = max(1, (n_act - 1).bit_length())
        words, act = _split_pass(records, tokens, j, n_act, ib, out)
        words.sort()
        _gather_sorted(words, act, ib, out, len(records) - n_act)
        records, out = out, records
    return records


@njit(cache=True, nogil=True)
def _levels(records, tokens, capacity):
    """Walk the sorted keys once, skipping repeats; a key adds the nodes of depths lcp+1..len, where lcp
    is its common prefix with the previous key. Depth-d nodes arrive in sorted order, which is their BFS
    order. Returns per-depth buffers (depth d at [base[d], base[d] + count[d])): labels int32, terminal
    bool, degree int32, plus base int64 [D+1] and count int64 [D+1] (depth 0 = the root)."""
    D = capacity.shape[0] - 1
    base = np.zeros(D + 1, np.int64)
    for d in range(1, D + 1):
        base[d] = base[d - 1] + capacity[d - 1]
    total = base[D] + capacity[D]
    labels = np.empty(total, np.int32)
    terminal = np.zeros(total, np.bool_)
    degree = np.zeros(total, np.int32)
    count = np.zeros(D + 1, np.int64)
    count[0] = 1
    pa, pn = np.int64(0), np.int64(0)
    for i in range(records.shape[0]):
        x = records[i]
        a = np.int64(x >> np.uint64(LEN_BITS))
        n = np.int64(x & _LEN_MASK)
        c = 0
        if i > 0:
            lim = min(n, pn)
            while c < lim and tokens[a + c] == tokens[pa + c]:
                c += 1
            if c == n and n == pn:
                continue  # a repeat of the previous key
        for d in range(c + 1, n + 1):
            k = base[d] + count[d]
            count[d] += 1
            labels[k] = tokens[a + d - 1]
            # the key's depth-(d-1) node is the newest at that depth: made now or by an earlier key
            # with the same prefix, since depth-(d-1) nodes are handed out in sorted key order
            degree[base[d - 1] + count[d - 1] - 1] += 1
        terminal[base[n] + count[n] - 1] = True
        pa, pn = a, n
    return labels, terminal, degree, base, count


def key_levels(tokens: np.ndarray, offsets: np.ndarray) -> tuple:
    """The trie's nodes depth by depth: (labels, terminal, degree) lists indexed by depth (depth 0 the root,
    whose label list is empty), each in BFS order."""
    records = sorted_records(tokens, offsets)
    lengths = np.diff(offsets)
    capacity = np.bincount(lengths, minlength=int(lengths.max()) + 1)[::-1].cumsum()[::-1]
    capacity[0] = 1
    buf_labels, buf_terminal, buf_degree, base, count = _levels(records, tokens, capacity)
    del records
    cut = lambda buf: [buf[b:b + c] for b, c in zip(base, count)]  # noqa: E731
    return cut(buf_labels), cut(buf_terminal), cut(buf_degree)


def build_arrays(tokens: np.ndarray, offsets: np.ndarray, progress: Progress = None, tails: bool = True) -> dict:
    """Checked flat keys (see inputs.key_arrays) -> dict(arrays=name -> array, num_nodes,
    num_keys, high_bits, tail_nodes, tail_low_bits, tail_high_bits); the layout is documented on SuccinctTrie.
    tails=False keeps every label out of the tail store."""
    report(progress, 0, 3, "trie")
    labels, terminal, degree = key_levels(tokens, offsets)
    report(progress, 1, 3, "trie")
    return levels_arrays([[x] for x in labels], [[x] for x in terminal], [[x] for x in degree], progress, tails=tails)


@njit(cache=True, nogil=True)
def _put_louds(degree, words, pos):
    """Each node's degree ones, then a zero, from bit pos on; returns the next position."""
    one = np.uint64(1)
    for v in range(degree.shape[0]):
        for _ in range(degree[v]):
            words[pos >> 6] |= one << np.uint64(pos & 63)
            pos += 1
        pos += 1
    return pos


@njit(cache=True, nogil=True)
def _put_bits(flags, words, start):
    one = np.uint64(1)
    for i in range(flags.shape[0]):
        if flags[i]:
            p = start + i
            words[p >> 6] |= one << np.uint64(p & 63)


def levels_arrays(labels: list, terminal: list, degree: list, progress: Progress = None, label_low=None,
                  tails: bool = True) -> dict:
    """build_arrays from the nodes depth by depth, each depth a list of pieces in BFS order (key_levels' arrays
    one a depth, or a sharded build's shard files: a piece may be a callable that reads it, with a len()).
    Pieces are read one at a time, so a piece on disk is held only while it is laid out: label_low(dtype, count),
    when given, opens the stream (an ArtifactWriter.stream_array) that receives label_low instead of keeping it;
    the bit arrays and their directories are built in memory. The labels' stores are chosen by trie/labels.py,
    the same pass for both callers, so a sharded build writes the bytes of the single-process one."""
    count = np.array([sum(len(x) for x in pieces) for pieces in degree], np.int64)
    level_offsets = np.zeros(len(count) + 1, np.int64)
    np.cumsum(count, out=level_offsets[1:])
    n = int(level_offsets[-1])
    if n > MAX_NODES:
        raise GtmkitError(f"keys: the trie would have {n} nodes, more than {MAX_NODES} (2^32-1)")
    louds = np.zeros(((2 * n + 1) >> 6) + 1, np.uint64)
    louds[0] = np.uint64(1)  # the super-root's '10'
    pos = 2
    term = np.zeros((n >> 6) + 1, np.uint64)
    at = 0
    for d in range(len(degree)):
        for g, t in zip(degree[d], terminal[d]):
            g = np.asarray(whole(g), np.int32)
            pos = _put_louds(g, louds, pos)
            _put_bits(np.asarray(whole(t), np.bool_), term, at)
            at += len(g)
    louds_rank = rank_directory(louds)
    arrays = {
        "louds": louds,
        "louds_rank": louds_rank,
        "louds_select0": select_samples(louds_rank, len(louds), n + 1, True),  # a zero a node + the super-root's
        "louds_select1": select_samples(louds_rank, len(louds), n, False),
    }
    report(progress, 2, 3, "trie")
    enc = encode_labels(labels, terminal, degree, level_offsets, sink=label_low, tails=tails)
    arrays.update(enc.pop("arrays"))
    term_rank = rank_directory(term)
    num_keys = int(term_rank[-1, 0])
    arrays.update(terminal=term, terminal_rank=term_rank,
                  terminal_select1=select_samples(term_rank, len(term), num_keys, False),
                  level_offsets=level_offsets)
    report(progress, 3, 3, "trie")
    return dict(arrays=arrays, num_nodes=n, num_keys=num_keys, **enc)
