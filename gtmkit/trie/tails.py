"""Tail labels of the succinct trie: the label of a node that continues a single-child chain is moved out of the
16-bit label arrays into a tail store coded by frequency, where that saves bytes (FlashTrie App. A: alpha < 1 - 1/k).

A tail node is a node whose parent is not the root, has one child and ends no key: the chain below a branching
node (or a key's end) whose tokens MARISA folds into its TAIL. Every node keeps its LOUDS bits and id, so node
ids, key ids and the search's tie order are today's; only where a label is stored changes:

    label_tail       uint64 [(n-1)//64 + 1]   bit j: node j+1 is a tail node (one zero word when tails are off)
    label_tail_rank  uint64 [..., 2]          rank9 directory of label_tail
    tail_dict        int32 [V]                distinct tail tokens, most frequent first (ties: token asc)
    tail_low         uint64 [t*b//64 + 1]     code & (2^b - 1) of tail node i (i = rank1(label_tail, j)), b bits
    tail_wide        uint64 [t//64 + 1]       bit i: tail node i's code is >= 2^b (one zero word when none is)
    tail_wide_rank   uint64 [..., 2]          rank9 directory of tail_wide
    tail_high        uint64 [w*hb//64 + 1]    code >> b of the w wide codes in order, hb = tail_high_bits bits

Suffix sharing comes from the dictionary: a token repeated along many chains (a SID's trailing 0, a word's
common last BPE piece) costs its code, a few bits, at each; the frequent codes are short. Head labels (all
other nodes) stay in label_low / label_high, indexed by j - rank1(label_tail, j)."""

from __future__ import annotations

import numpy as np

from .._rank_select import pack_bits, pack_fields, rank_directory, words_for

TAIL_ARRAYS = ("label_tail", "label_tail_rank", "tail_dict", "tail_low", "tail_wide", "tail_wide_rank", "tail_high")


def tail_flags(degree: list, terminal: list) -> np.ndarray:
    """bool [n-1]: entry j (node j+1) is a tail node; degree / terminal: per depth, BFS order (depth 0 the root)."""
    out = [np.zeros(len(degree[1]) if len(degree) > 1 else 0, np.bool_)]  # the root's children are heads
    for d in range(1, len(degree) - 1):
        g = np.asarray(degree[d], np.int64)
        out.append(np.repeat((g == 1) & ~np.asarray(terminal[d], np.bool_), g))
    return np.concatenate(out) if out else np.zeros(0, np.bool_)


def _rank_bytes(nbits: int) -> int:
    w = words_for(nbits)
    return 8 * w + 16 * ((w + 7) // 8 + 1)


def _code_layout(codes: np.ndarray, cw: int) -> tuple:
    """(bytes, b): the base width b of the codes' escape layout that takes fewest bytes."""
    t = len(codes)
    counts = np.bincount(_bit_lengths(codes), minlength=cw + 1)
    wider = counts[::-1].cumsum()[::-1]  # codes of bit length >= i
    best = None
    for b in range(cw + 1):
        n_wide = int(wider[b + 1]) if b + 1 <= cw else 0
        size = 8 * words_for(t * b)
        size += (_rank_bytes(t) + 8 * words_for(n_wide * (cw - b))) if n_wide else _rank_bytes(0) + 8
        if best is None or size < best[0]:
            best = (size, b)
    return best


def _bit_lengths(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.int64)
    out = np.zeros(len(x), np.int64)
    for i in range(63):
        hit = (x >> i) > 0
        if not hit.any():
            break
        out += hit
    return out


def no_tails(n: int) -> dict:
    """The tail arrays of a trie that keeps every label in label_low / label_high."""
    z = np.zeros(1, np.uint64)
    return dict(arrays={"label_tail": np.zeros(1, np.uint64), "label_tail_rank": rank_directory(np.zeros(1, np.uint64)),
                        "tail_dict": np.zeros(0, np.int32), "tail_low": z.copy(), "tail_wide": z.copy(),
                        "tail_wide_rank": rank_directory(z), "tail_high": z.copy()},
                tail_nodes=0, tail_low_bits=0, tail_high_bits=0)


def encode_tails(flags: np.ndarray, labels: np.ndarray) -> dict:
    """Tail store of the labels at flags (see the module docstring) -> dict(arrays, tail_nodes, tail_low_bits,
    tail_high_bits, bytes): bytes it adds, net of nothing (the caller weighs it against the label bytes it saves)."""
    tail = np.asarray(labels[flags], np.int64)
    tokens, inverse, counts = np.unique(tail, return_inverse=True, return_counts=True)
    order = np.lexsort((tokens, -counts))  # most frequent first: their codes are the short ones
    code_of = np.empty(len(tokens), np.int64)
    code_of[order] = np.arange(len(tokens))
    codes = code_of[inverse.reshape(-1)]
    cw = int(len(tokens) - 1).bit_length()
    _, b = _code_layout(codes, cw)
    wide = codes >= (1 << b)
    hb = cw - b if wide.any() else 0
    words = pack_bits(flags)
    wide_words = pack_bits(wide)
    arrays = {"label_tail": words, "label_tail_rank": rank_directory(words),
              "tail_dict": tokens[order].astype(np.int32),
              "tail_low": pack_fields(codes & ((1 << b) - 1), b),
              "tail_wide": wide_words if hb else np.zeros(1, np.uint64),
              "tail_high": pack_fields(codes[wide] >> b, hb) if hb else np.zeros(1, np.uint64)}
    arrays["tail_wide_rank"] = rank_directory(arrays["tail_wide"])
    return dict(arrays=arrays, tail_nodes=int(len(tail)), tail_low_bits=int(b), tail_high_bits=int(hb),
                bytes=int(sum(a.nbytes for a in arrays.values())))


def head_label_bytes(n_labels: int, high_bits: int) -> int:
    """Bytes of label_low + label_high for n_labels labels."""
    return 2 * n_labels + 8 * words_for(n_labels * high_bits)


def choose_tails(flags: np.ndarray, labels: np.ndarray, high_bits: int) -> dict:
    """encode_tails' store if it takes fewer bytes than the tail labels it moves out of label_low / label_high,
    else None (the trie keeps every label there, so it never grows)."""
    n_tail = int(flags.sum())
    if n_tail == 0:
        return None
    enc = encode_tails(flags, labels)
    n = len(flags)
    kept = head_label_bytes(n - n_tail, high_bits) + enc["bytes"]
    off = head_label_bytes(n, high_bits) + sum(a.nbytes for a in no_tails(n + 1)["arrays"].values())
    return enc if kept < off else None
