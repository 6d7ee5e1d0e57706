"""Small lookup tables the GPU trie search builds from a SuccinctTrie when it uploads it (not part of the
artifact, not in `nbytes`): they shorten the chains of dependent memory reads that bound a search step
on the GPU (docs/design.md §6; benchmarks/tools/profile_trie.py measures them).

- Zero positions: the exact LOUDS position of every 2^ZERO_SHIFT-th zero. A node's child range is the
  gap between its zero and the next (select0), and from a sampled position the kernel finds both in
  four words it loads at once, instead of walking the rank directory (several dependent reads).
- Root directory: a bit per token under the root's largest label (set where the root has that child)
  and the ones before each word, so a first-step proposal finds its child with one read instead of a
  ~20-level binary search over the root's children (about a million on a 10M-key trie). Built only when
  the bitmap stays small (ROOT_MAX_BITS, or 64 bits a child).
- Wide groups: where the four words from a sample do not reach the zero after its group (a node of the
  group, or one just before it, has a long run of children), the group's zero positions are listed and
  its sample points at the list instead (-1 - row). Such a node took the select directory's walk, twice
  (~12 dependent reads), and a step waits for its slowest thread: on a 10M-key trie 1.6% of the groups are
  wide, but ~100 of step 0's ~1000 matches (popular first tokens, many children) and some of step 1's land
  in them.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from . import nav as nav

ZERO_SHIFT = 6  # a sample every 64 zeros: ~128 LOUDS bits apart, within the 4 words the kernel loads
PAD_WORDS = 4   # words of ones after the LOUDS copy on the device: the kernel's 4-word loads stay inside
ROOT_MAX_BITS = 1 << 24
WIDE_SHARE = 8  # the wide groups' lists take at most 1/WIDE_SHARE of the trie's bytes; groups past that keep
                # the general path (10M keys: 7.5k wide groups, 3.9 MB against 97 MB of trie)


@njit(cache=True, nogil=True, inline="always")
def _zero_bits(words, nbits, i):
    """The zeros of word i as set bits, bits at or past nbits left out."""
    x = ~words[i]
    valid = min(64, nbits - 64 * i)
    if valid < 64:
        x &= (np.uint64(1) << np.uint64(valid)) - np.uint64(1)
    return x


@njit(cache=True, nogil=True, inline="always")
def _count_zeros(words, nbits):
    zeros = 0
    for i in range(words.shape[0]):
        x = _zero_bits(words, nbits, i)
        while x:
            zeros += 1
            x &= x - np.uint64(1)
    return zeros


@njit(cache=True, nogil=True)
def zero_positions(words, nbits, shift):
    """int64 [ceil(zeros / 2^shift)]: position of zero number j << shift, for the zeros in bits [0, nbits)."""
    zeros = _count_zeros(words, nbits)
    step = 1 << shift
    out = np.empty((zeros + step - 1) // step, np.int64)
    k = 0
    for i in range(words.shape[0]):
        x = _zero_bits(words, nbits, i)
        while x:
            if (k & (step - 1)) == 0:
                out[k >> shift] = 64 * i + np.int64(trailing_zeros(x))
            k += 1
            x &= x - np.uint64(1)
    return out


@njit(cache=True, nogil=True)
def _window_zeros(words, nbits, p):
    """Zeros in [p, nbits) within the four words from p's, as the kernel's zero_pair loads them."""
    w = p >> 6
    c = 0
    for i in range(w, min(w + 4, words.shape[0])):
        x = _zero_bits(words, nbits, i)
        if i == w:
            x &= ~np.uint64(0) << np.uint64(p & 63)
        while x:
            c += 1
            x &= x - np.uint64(1)
    return c


@njit(cache=True, nogil=True)
def _wide_groups(words, nbits, zpos, shift, max_wide):
    n_zeros = _count_zeros(words, nbits)
    g = 1 << shift
    marked = np.zeros(zpos.shape[0], np.bool_)
    count = 0
    for j in range(zpos.shape[0]):
        if count < max_wide and _window_zeros(words, nbits, zpos[j]) < min(g + 1, n_zeros - j * g):
            marked[j] = True
            count += 1
    samples = zpos.copy()
    wide = np.full((count, g + 1), nbits, np.int64)  # zeros past the last: nbits (no node reads them)
    row = 0
    for j in range(zpos.shape[0]):
        if not marked[j]:
            continue
        i, c = zpos[j] >> 6, 0
        x = _zero_bits(words, nbits, i) & (~np.uint64(0) << np.uint64(zpos[j] & 63))
        while c <= g:
            while x == 0 and i + 1 < words.shape[0]:
                i += 1
                x = _zero_bits(words, nbits, i)
            if x == 0:
                break
            wide[row, c] = 64 * i + np.int64(trailing_zeros(x))
            c += 1
            x &= x - np.uint64(1)
        samples[j] = -1 - row
        row += 1
    return samples, wide


def max_wide_groups(trie_nbytes: int, shift: int) -> int:
    """How many wide groups zero_samples may list for a trie of trie_nbytes (WIDE_SHARE)."""
    return trie_nbytes // WIDE_SHARE // (8 * ((1 << shift) + 1))


def zero_samples(words, nbits: int, shift: int, max_wide: int) -> tuple:
    """(samples int64 [ceil(zeros / 2^shift)], wide int64 [w, 2^shift + 1]): samples[j] is the position of
    zero j << shift, or -1 - i where group j is wide: its zeros j << shift .. (j + 1) << shift are wide[i]
    (nbits for those past the last zero). At most max_wide groups are listed, the first ones (shallow
    nodes: every search reads them)."""
    words = np.ascontiguousarray(words, np.uint64)
    return _wide_groups(words, nbits, zero_positions(words, nbits, shift), shift, max_wide)


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
