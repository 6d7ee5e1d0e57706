"""Tail labels of the succinct trie: the label of a node that continues a single-child chain is moved out of the
head label arrays into a tail store coded by frequency, where that saves bytes (FlashTrie App. A: alpha < 1 - 1/k).

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

Suffix sharing comes from the dictionary: a token repeated along many chains (a SID's trailing code, a word's
common last BPE piece) costs its code, a few bits, at each; the frequent codes are short. Head labels (all
other nodes) stay in label_low / label_high, indexed by j - rank1(label_tail, j) (trie/labels.py)."""

from __future__ import annotations

import numpy as np
from numba import njit

from .._rank_select import rank_directory, words_for

TAIL_ARRAYS = ("label_tail", "label_tail_rank", "tail_dict", "tail_low", "tail_wide", "tail_wide_rank", "tail_high")
LUT_TOKENS = 1 << 22  # tail tokens below this are counted and coded through a lookup table, larger ones by sorting


@njit(cache=True, nogil=True)
def mark_chains(degree, terminal, words, j):
    """Set bit j.. of words for the children of one piece of parents (BFS order, first child entry j) that are
    tail nodes: the only child of a parent that ends no key. Returns the entry after the piece's children."""
    one = np.uint64(1)
    for v in range(degree.shape[0]):
        g = degree[v]
        if g == 1 and not terminal[v]:
            words[j >> 6] |= one << np.uint64(j & 63)
        j += g
    return j


@njit(cache=True, nogil=True)
def take_tails(labels, words, j, out, at):
    """Append to out (from at) the labels of the piece's tail nodes (the piece's first entry j); returns the end."""
    for i in range(labels.shape[0]):
        p = j + i
        if (words[p >> 6] >> np.uint64(p & 63)) & np.uint64(1):
            out[at] = labels[i]
            at += 1
    return at


def rank_bytes(nbits: int) -> int:
    """Bytes of an nbits-bit vector and its rank9 directory."""
    w = words_for(nbits)
    return 8 * w + 16 * ((w + 7) // 8 + 1)


def no_tails(n: int = 0) -> dict:
    """The tail arrays of a trie that keeps every label in label_low / label_high."""
    z = np.zeros(1, np.uint64)
    return dict(arrays={"label_tail": z.copy(), "label_tail_rank": rank_directory(z), "tail_dict": np.zeros(0, np.int32),
                        "tail_low": z.copy(), "tail_wide": z.copy(), "tail_wide_rank": rank_directory(z),
                        "tail_high": z.copy()},
                tail_nodes=0, tail_low_bits=0, tail_high_bits=0)


NO_TAIL_BYTES = 2 * rank_bytes(0) + 16  # no_tails' arrays: two one-word bit vectors with directories, two words


@njit(cache=True, nogil=True)
def _count(tail, size):
    """int32 [size]: occurrences of each token below size."""
    counts = np.zeros(size, np.int32)
    for i in range(tail.shape[0]):
        counts[tail[i]] += 1
    return counts


@njit(cache=True, nogil=True)
def _present(counts):
    """(tokens int64, their counts int64) of the nonzero entries, token ascending."""
    k = 0
    for i in range(counts.shape[0]):
        k += counts[i] != 0
    tokens, out = np.empty(k, np.int64), np.empty(k, np.int64)
    k = 0
    for i in range(counts.shape[0]):
        if counts[i]:
            tokens[k], out[k] = i, counts[i]
            k += 1
    return tokens, out


def tail_dictionary(tail: np.ndarray, max_tail: int) -> tuple:
    """(tokens by code int32 [V], count of each code int64 [V], lookup): most frequent first, ties by token; lookup
    is the token-indexed count array (tokens below LUT_TOKENS), reused by tail_codes as its code table, or None."""
    lookup = None
    if max_tail < LUT_TOKENS:
        lookup = _count(tail, max_tail + 1)
        tokens, counts = _present(lookup)
    else:
        s = np.sort(tail)
        starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
        tokens, counts = s[starts].astype(np.int64), np.diff(np.r_[starts, len(s)])
    top = int(counts.max()) if len(counts) else 0
    if top < 1 << 16:  # a stable sort of 16-bit keys is a radix sort; tokens ascend already, so ties keep that order
        order = np.argsort((top - counts).astype(np.uint16), kind="stable")
    else:
        order = np.lexsort((tokens, -counts))
    return tokens[order].astype(np.int32), counts[order], lookup


def code_layout(counts: np.ndarray) -> tuple:
    """(bytes, b, hb): the base width b and escape width hb of the code layout that takes fewest bytes, for codes
    0..V-1 used counts[c] times each."""
    t, v = int(counts.sum()), len(counts)
    cw = int(v - 1).bit_length()
    lengths = np.zeros(v, np.int64)
    lengths[1:] = np.floor(np.log2(np.arange(1, v))).astype(np.int64) + 1
    by_len = np.bincount(lengths, weights=counts, minlength=cw + 1).astype(np.int64)
    wider = by_len[::-1].cumsum()[::-1]  # tail nodes whose code has bit length >= i
    best = None
    for b in range(cw + 1):
        n_wide = int(wider[b + 1]) if b + 1 <= cw else 0
        size = 8 * words_for(t * b) + 4 * v
        size += rank_bytes(t) + 8 * words_for(n_wide * (cw - b)) if n_wide else rank_bytes(0) + 8
        if best is None or size < best[0]:
            best = (size, b, cw - b if n_wide else 0)
    return best


@njit(cache=True, nogil=True)
def _pack_codes(tail, table, b, hb, low, wide, high):
    """Codes (table[token]) of the tail labels into low (b bits each), and for codes >= 2^b a wide bit and their high
    part (hb bits) in order."""
    one = np.uint64(1)
    mask = np.int64((1 << b) - 1)
    w = 0
    for i in range(tail.shape[0]):
        c = np.int64(table[tail[i]])
        if b:
            v = np.uint64(c & mask)
            p = i * b
            off = np.uint64(p & 63)
            low[p >> 6] |= v << off
            if (p & 63) + b > 64:
                low[(p >> 6) + 1] |= v >> (np.uint64(64) - off)
        if hb and c >> b:
            wide[i >> 6] |= one << np.uint64(i & 63)
            v = np.uint64(c >> b)
            p = w * hb
            off = np.uint64(p & 63)
            high[p >> 6] |= v << off
            if (p & 63) + hb > 64:
                high[(p >> 6) + 1] |= v >> (np.uint64(64) - off)
            w += 1


def tail_store(words: np.ndarray, tail: np.ndarray, tokens: np.ndarray, counts: np.ndarray, lookup, b: int,
               hb: int) -> dict:
    """The tail arrays (module docstring) of the tail labels `tail` (in node order), flagged in words; tokens and
    counts by code and lookup as tail_dictionary gives them."""
    if lookup is not None:
        lookup[tokens] = np.arange(len(tokens), dtype=np.int32)  # the count table becomes the code table
        table, keys = lookup, tail
    else:  # tokens >= LUT_TOKENS: codes through the tokens' ranks
        by_token = np.argsort(tokens)
        table, keys = by_token.astype(np.int64), np.searchsorted(tokens[by_token], tail)
    t = len(tail)
    n_wide = int(counts[1 << b:].sum()) if hb else 0
    low = np.zeros(words_for(t * b), np.uint64)
    wide = np.zeros(words_for(t) if hb else 1, np.uint64)
    high = np.zeros(words_for(n_wide * hb), np.uint64)
    _pack_codes(keys, table, b, hb, low, wide, high)
    arrays = {"label_tail": words, "label_tail_rank": rank_directory(words), "tail_dict": tokens, "tail_low": low,
              "tail_wide": wide, "tail_wide_rank": rank_directory(wide), "tail_high": high}
    return dict(arrays=arrays, tail_nodes=int(t), tail_low_bits=int(b), tail_high_bits=int(hb))
