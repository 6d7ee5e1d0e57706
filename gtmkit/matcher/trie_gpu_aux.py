"""Small lookup tables the GPU trie search builds from a SuccinctTrie when it uploads it (not part of the
artifact, not in `nbytes`): they shorten the chains of dependent memory reads that bound a search step
on the GPU (benchmarks/results/trie_gpu_profile_h200.md).

- Zero positions: the exact LOUDS position of every 2^ZERO_SHIFT-th zero. A node's child range is the
  gap between its zero and the next (select0), and from a sampled position the kernel finds both in
  four words it loads at once, instead of walking the rank directory (several dependent reads).
- Root directory: a bit per token under the root's largest label (set where the root has that child)
  and the ones before each word, so a first-step proposal finds its child with one read instead of a
  ~20-level binary search over the root's children (about a million on a 10M-key trie). Built only when
  the bitmap stays small (ROOT_MAX_BITS, or 64 bits a child).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..indexer import succinct_nav as nav

ZERO_SHIFT = 6  # a sample every 64 zeros: ~128 LOUDS bits apart, within the 4 words the kernel loads
PAD_WORDS = 4   # words of ones after the LOUDS copy on the device: the kernel's 4-word loads stay inside
ROOT_MAX_BITS = 1 << 24


@njit(cache=True, inline="always")
def _zero_bits(words, nbits, i):
    """The zeros of word i as set bits, bits at or past nbits left out."""
    x = ~words[i]
    valid = min(64, nbits - 64 * i)
    if valid < 64:
        x &= (np.uint64(1) << np.uint64(valid)) - np.uint64(1)
    return x


@njit(cache=True)
def zero_positions(words, nbits, shift):
    """int64 [ceil(zeros / 2^shift)]: position of zero number j << shift, for the zeros in bits [0, nbits)."""
    zeros = 0
    for i in range(words.shape[0]):
        x = _zero_bits(words, nbits, i)
        while x:
            zeros += 1
            x &= x - np.uint64(1)
    step = 1 << shift
    out = np.empty((zeros + step - 1) // step, np.int64)
    k = 0
    for i in range(words.shape[0]):
        x = _zero_bits(words, nbits, i)
        while x:
            low = x & (~x + np.uint64(1))
            if (k & (step - 1)) == 0:
                b = 0
                while (low >> np.uint64(b)) != np.uint64(1):
                    b += 1
                out[k >> shift] = 64 * i + b
            k += 1
            x ^= low
    return out


def louds_padded(words: np.ndarray) -> np.ndarray:
    """The LOUDS words followed by PAD_WORDS words of ones (no zero: a select never lands there)."""
    return np.concatenate([np.ascontiguousarray(words, np.uint64), np.full(PAD_WORDS, ~np.uint64(0), np.uint64)])


def root_directory(arrays) -> tuple:
    """(bits uint64 [W], ones before each word uint32 [W], number of bits) for the root's child labels, or
    empty arrays and 0 when the bitmap would be too large."""
    first, end = nav.child_range(arrays, 0)
    deg = int(end - first)
    labels = nav.labels_between(arrays, first, end) if deg else np.empty(0, np.int64)
    nbits = int(labels[-1]) + 1 if deg else 0
    if deg == 0 or nbits > max(ROOT_MAX_BITS, 64 * deg):
        return np.zeros(1, np.uint64), np.zeros(1, np.uint32), 0
    bits = np.zeros((nbits + 63) // 64, np.uint64)
    np.bitwise_or.at(bits, labels >> 6, np.left_shift(np.uint64(1), (labels & 63).astype(np.uint64)))
    counts = np.bitwise_count(bits) if hasattr(np, "bitwise_count") else _popcounts(bits)
    before = np.zeros(bits.shape[0], np.uint32)
    np.cumsum(counts[:-1], out=before[1:])
    return bits, before, nbits


def _popcounts(bits: np.ndarray) -> np.ndarray:
    b = bits.view(np.uint8).reshape(-1, 8)
    return np.unpackbits(b, axis=1).sum(axis=1).astype(np.uint32)
