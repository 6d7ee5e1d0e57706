"""The label pass of the trie build that both builds run (in process and in shards): picks each label's store -
head arrays at 8 or 16 low bits, the tail store (trie/tails.py), or a constant deepest level - from counted bytes.

Head labels (nodes neither tail nor in a constant level), in node order:
    label_low    uint8 or uint16 [h]           token & (2^low_bits - 1); low_bits = 8 when that takes fewer bytes
    label_high   uint64 [h*high_bits//64 + 1]  token >> low_bits in high_bits bits (high_bits may be 0)
    level_label  int32 [K]                     the one token of every node of the K deepest levels, each of which
                                               has a single token (a SID's trailing code): nodes >= const_from
The decisions read counts only; the tail dictionary is built only when the tail store could still pay."""

from __future__ import annotations

import numpy as np
from numba import njit

from .._rank_select import words_for
from .tails import (NO_TAIL_BYTES, code_layout, mark_chains, no_tails, rank_bytes, tail_dictionary, tail_store,
                    take_tails)

LABEL_WIDTHS = (16, 8)  # label_low's bits; 16 first: a tie keeps the format-2 layout
# A layout other than format 2's is kept only where it saves this share of the trie's bytes: its labels cost the
# search a rank or a level lookup each (benchmarks/results/trie_layouts_h100.md)
MIN_SAVING = 0.125


def whole(piece) -> np.ndarray:
    """A piece of levels_arrays' input, read if it is on disk."""
    return piece() if callable(piece) else piece


@njit(cache=True, nogil=True)
def _piece_stats(labels, words, j, use_tails):
    """(largest head label, largest tail label, tail nodes, smallest label, largest label) of one piece."""
    max_head, max_tail, n_tail = -1, -1, 0
    lo, hi = np.int64(2**62), np.int64(-1)
    for i in range(labels.shape[0]):
        x = np.int64(labels[i])
        lo, hi = min(lo, x), max(hi, x)
        p = j + i
        if use_tails and (words[p >> 6] >> np.uint64(p & 63)) & np.uint64(1):
            max_tail = max(max_tail, x)
            n_tail += 1
        else:
            max_head = max(max_head, x)
    return max_head, max_tail, n_tail, lo, hi


@njit(cache=True, nogil=True)
def _put_heads(labels, words, j, use_tails, low, high, low_bits, high_bits, at):
    """Head labels of one piece into low[0..] and high's fields at.. (tail nodes skipped); returns how many."""
    mask = np.int64((1 << low_bits) - 1)
    k = 0
    for i in range(labels.shape[0]):
        p = j + i
        if use_tails and (words[p >> 6] >> np.uint64(p & 63)) & np.uint64(1):
            continue
        x = np.int64(labels[i])
        low[k] = x & mask
        if high_bits:
            v = np.uint64(x >> low_bits)
            q = (at + k) * high_bits
            off = np.uint64(q & 63)
            high[q >> 6] |= v << off
            if (q & 63) + high_bits > 64:
                high[(q >> 6) + 1] |= v >> (np.uint64(64) - off)
        k += 1
    return k


def head_bytes(count: int, max_label: int, widths: tuple = LABEL_WIDTHS) -> tuple:
    """(bytes, low_bits, high_bits) of count head labels up to max_label at the label_low width that takes fewest."""
    best = None
    for lb in widths:
        hb = (max(max_label, 0) >> lb).bit_length()
        size = count * lb // 8 + 8 * words_for(count * hb)
        if best is None or size + count // 8 <= best[0]:  # a narrower low part must save a bit a label to pay its reads
            best = (size, lb, hb)
    return best


def encode_labels(labels: list, terminal: list, degree: list, level_offsets: np.ndarray, sink=None,
                  tails: bool = True) -> dict:
    """Label arrays (module docstring and trie/tails.py) of a trie given depth by depth as levels_arrays takes it ->
    dict(arrays, low_bits, high_bits, const_from, tail_nodes, tail_low_bits, tail_high_bits). sink(dtype, count):
    a stream (.write, .close) that receives label_low instead of keeping it; pieces are read twice, one at a time.
    tails=False: the format-2 layout (every label in 16-bit label_low / label_high), for comparisons."""
    n = int(level_offsets[-1])
    depths = len(level_offsets) - 2  # the deepest level
    words = np.zeros(words_for(n - 1), np.uint64)
    use_tails = bool(tails) and depths >= 2
    if use_tails:
        for d in range(1, depths):
            j = int(level_offsets[d + 1]) - 1
            for g, t in zip(degree[d], terminal[d]):
                j = mark_chains(np.asarray(whole(g), np.int32), np.asarray(whole(t), np.bool_), words, j)
    per_depth = []  # (max head, max tail, tail nodes, smallest, largest) per depth >= 1
    for d in range(1, depths + 1):
        j, acc = int(level_offsets[d]) - 1, [-1, -1, 0, 2**62, -1]
        for x in labels[d]:
            x = np.asarray(whole(x))
            s = _piece_stats(x, words, j, use_tails)
            acc = [max(acc[0], s[0]), max(acc[1], s[1]), acc[2] + s[2], min(acc[3], s[3]), max(acc[4], s[4])]
            j += len(x)
        per_depth.append(acc)
    const = 0  # deepest levels of one token each: a node of one is always an only child, so never a head's sibling
    while tails and const < depths - 1 and per_depth[depths - 1 - const][3] == per_depth[depths - 1 - const][4] \
            and int(level_offsets[depths - const + 1] - level_offsets[depths - const]) >= 3:  # 4 bytes pay
        const += 1
    const_from = int(level_offsets[depths + 1 - const])
    if const:
        words[(const_from - 1) >> 6] &= np.uint64((1 << ((const_from - 1) & 63)) - 1)
        words[((const_from - 1) >> 6) + 1:] = 0
    kept = per_depth[:depths - const]
    max_head = max([a[0] for a in kept], default=0)
    max_tail = max([a[1] for a in kept], default=-1)
    n_tail = int(sum(a[2] for a in kept))
    n_labels = const_from - 1
    plain = head_bytes(n_labels, max(max_head, max_tail))[0] + NO_TAIL_BYTES
    format2 = head_bytes(n - 1, max(a[4] for a in per_depth) if per_depth else 0, (16,))[0] + NO_TAIL_BYTES
    need = MIN_SAVING * (format2 + rank_bytes(2 * n + 1) + rank_bytes(n))  # what a layout must save to be kept
    store = None
    least = head_bytes(n_labels - n_tail, max_head)[0] + rank_bytes(n_labels)  # with tails, before their codes
    if n_tail and least < plain and format2 - least - 4 * const >= need:  # it could pay: count
        tail = np.empty(n_tail, np.int32)
        at = 0
        for d in range(1, depths + 1 - const):
            j = int(level_offsets[d]) - 1
            for x in labels[d]:
                x = np.asarray(whole(x))
                at = take_tails(x, words, j, tail, at)
                j += len(x)
        tokens, counts, lookup = tail_dictionary(tail, max_tail)
        size, b, hb = code_layout(counts)
        if head_bytes(n_labels - n_tail, max_head)[0] + rank_bytes(n_labels) + size < plain:
            store = tail_store(words, tail, tokens, counts, lookup, b, hb)
        del tail
    if store is None:
        use_tails, n_tail, max_head = False, 0, max(max_head, max_tail)
        store = no_tails()
    widths = LABEL_WIDTHS if tails else (16,)
    size = head_bytes(n_labels - n_tail, max_head, widths)[0] + 4 * const + sum(a.nbytes for a in store["arrays"].values())
    if format2 - size < need:
        # format 2's layout: the search reads its labels with no rank (trie/nav.py PlainLoudsArrays)
        use_tails, n_tail, const, const_from, widths, store = False, 0, 0, n, (16,), no_tails()
        n_labels = n - 1
        max_head = max(a[4] for a in per_depth) if per_depth else 0
    _, low_bits, high_bits = head_bytes(n_labels - n_tail, max_head, widths)
    dtype = np.uint8 if low_bits == 8 else np.uint16
    h = n_labels - n_tail
    high = np.zeros(words_for(h * high_bits), np.uint64)
    stream = sink(dtype, h) if sink is not None else None
    low = np.empty(h, dtype) if stream is None else None
    at = 0
    for d in range(1, depths + 1 - const):
        j = int(level_offsets[d]) - 1
        for x in labels[d]:
            x = np.asarray(whole(x))
            out = low[at:] if stream is None else np.empty(len(x), dtype)
            k = _put_heads(x, words, j, use_tails, out, high, low_bits, high_bits, at)
            if stream is not None:
                stream.write(out[:k])
            at += k
            j += len(x)
    arrays = dict(store["arrays"], label_high=high,
                  level_label=np.array([per_depth[d - 1][3] for d in range(depths + 1 - const, depths + 1)], np.int32))
    if stream is None:
        arrays["label_low"] = low
    else:
        stream.close()
    return dict(arrays=arrays, low_bits=low_bits, high_bits=high_bits, const_from=const_from,
                tail_nodes=store["tail_nodes"], tail_low_bits=store["tail_low_bits"],
                tail_high_bits=store["tail_high_bits"])
