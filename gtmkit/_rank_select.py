"""Bit-vector kernels of the succinct trie: rank/select directories over uint64 words and packed fields.

Bit i of a vector is bit (i & 63) of word i >> 6 (LSB first); a vector of nbits bits has nbits // 64 + 1
words (bits past nbits are zero), so rank1(nbits) never reads past the end."""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from ._bits import popcount

SUPER_BITS = 512  # rank superblock: one absolute count + seven 9-bit word counts (Vigna's rank9)
SAMPLE = 512  # select: every SAMPLE-th one (or zero) records its superblock

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_M9 = np.uint64(511)
_M32 = np.uint64(0xFFFFFFFF)
_M16 = np.uint64(0xFFFF)
_M8 = np.uint64(0xFF)


def words_for(nbits: int) -> int:
    """uint64 words of an nbits-bit vector: nbits // 64 + 1, so word p >> 6 exists for every p <= nbits."""
    return (int(nbits) >> 6) + 1


@njit(cache=True, nogil=True)
def pack_bits(flags):
    """bool/uint8 [n] -> uint64 [n // 64 + 1] with bit i = flags[i]."""
    n = flags.shape[0]
    out = np.zeros((n >> 6) + 1, np.uint64)
    for i in range(n):
        if flags[i]:
            out[i >> 6] |= _U1 << np.uint64(i & 63)
    return out


@njit(cache=True, nogil=True)
def rank_directory(words):
    """rank9 directory of uint64 [W] words -> uint64 [ceil(W/8) + 1, 2]: row s = (ones before superblock s,
    packed 9-bit counts of ones in words 0..w-1 of the superblock at bits 9*(w-1), w = 1..7)."""
    n_words = words.shape[0]
    n_super = (n_words + 7) >> 3
    rd = np.zeros((n_super + 1, 2), np.uint64)
    acc = _U0
    for s in range(n_super):
        rd[s, 0] = acc
        sub = _U0
        c = _U0
        for w in range(8):
            if w > 0:
                sub |= c << np.uint64(9 * (w - 1))
            idx = s * 8 + w
            if idx < n_words:
                c += popcount(words[idx])
        rd[s, 1] = sub
        acc += c
    rd[n_super, 0] = acc
    return rd


@njit(cache=True, nogil=True, inline="always")
def _sub(rd, s, w):
    if w == 0:
        return _U0
    return (rd[s, 1] >> np.uint64(9 * (w - 1))) & _M9


@njit(cache=True, nogil=True)
def rank1(words, rd, p):
    """Ones in bits [0, p), 0 <= p <= nbits."""
    s = p >> 9
    w = (p >> 6) & 7
    r = rd[s, 0] + _sub(rd, s, w)
    b = p & 63
    if b:
        r += popcount(words[p >> 6] & ((_U1 << np.uint64(b)) - _U1))
    return np.int64(r)


@njit(cache=True, nogil=True)
def select64(x, r):
    """Bit position of the r-th (0-based) set bit of uint64 x; x must have more than r set bits."""
    pos = 0
    c = np.int64(popcount(x & _M32))
    if r >= c:
        r -= c
        x >>= np.uint64(32)
        pos += 32
    c = np.int64(popcount(x & _M16))
    if r >= c:
        r -= c
        x >>= np.uint64(16)
        pos += 16
    c = np.int64(popcount(x & _M8))
    if r >= c:
        r -= c
        x >>= np.uint64(8)
        pos += 8
    for _ in range(r):
        x &= x - _U1
    return pos + np.int64(trailing_zeros(x))


@njit(cache=True, nogil=True)
def select_samples(rd, n_words, total, zeros):
    """uint32 [ceil(total/SAMPLE) + 1]: superblock holding the (j*SAMPLE)-th one (zeros=False) or zero
    (zeros=True), for the `total` ones/zeros of the vector; the last entry is the last superblock."""
    n_super = rd.shape[0] - 1
    n_samp = (total + SAMPLE - 1) // SAMPLE
    out = np.empty(n_samp + 1, np.uint32)
    j = 0
    for s in range(n_super):
        ones_after = np.int64(rd[s + 1, 0])
        after = (s + 1) * SUPER_BITS - ones_after if zeros else ones_after
        while j < n_samp and j * SAMPLE < after:
            out[j] = s
            j += 1
    out[n_samp] = max(n_super - 1, 0)
    return out


@njit(cache=True, nogil=True)
def _before(rd, s, zeros):
    ones = np.int64(rd[s, 0])
    return s * SUPER_BITS - ones if zeros else ones


@njit(cache=True, nogil=True)
def _select(words, rd, samples, k, zeros):
    j = k // SAMPLE
    lo = np.int64(samples[j])
    hi = np.int64(samples[j + 1])
    # largest superblock s in [lo, hi] with count-before(s) <= k; binary search spans long runs
    # (a root with a million children is a million ones without a zero).
    while hi - lo > 8:
        mid = (lo + hi + 1) >> 1
        if _before(rd, mid, zeros) <= k:
            lo = mid
        else:
            hi = mid - 1
    while lo < hi and _before(rd, lo + 1, zeros) <= k:
        lo += 1
    r = k - _before(rd, lo, zeros)
    w = 0
    for ww in range(1, 8):
        c = np.int64(_sub(rd, lo, ww))
        if zeros:
            c = 64 * ww - c
        if c <= r:
            w = ww
        else:
            break
    c = np.int64(_sub(rd, lo, w))
    if zeros:
        c = 64 * w - c
    x = words[lo * 8 + w]
    if zeros:
        x = ~x
    return (lo * 8 + w) * 64 + select64(x, r - c)


@njit(cache=True, nogil=True)
def select1(words, rd, samples, k):
    """Position of the k-th (0-based) one; k < number of ones."""
    return _select(words, rd, samples, k, False)


@njit(cache=True, nogil=True)
def select0(words, rd, samples, k):
    """Position of the k-th (0-based) zero; k < number of zeros within nbits."""
    return _select(words, rd, samples, k, True)


@njit(cache=True, nogil=True, inline="always")
def get_bit(words, i):
    return (words[i >> 6] >> np.uint64(i & 63)) & _U1


@njit(cache=True, nogil=True)
def pack_fields(values, width):
    """Non-negative ints [n] -> uint64 [n*width // 64 + 1] holding value i at bits [i*width, (i+1)*width)."""
    n = values.shape[0]
    out = np.zeros(((n * width) >> 6) + 1, np.uint64)
    if width == 0:
        return out
    for i in range(n):
        v = np.uint64(values[i])
        p = i * width
        w = p >> 6
        off = np.uint64(p & 63)
        out[w] |= v << off
        if (p & 63) + width > 64:
            out[w + 1] |= v >> (np.uint64(64) - off)
    return out


@njit(cache=True, nogil=True, inline="always")
def get_field(words, i, width):
    """Value i of a pack_fields array (0 when width == 0)."""
    if width == 0:
        return np.int64(0)
    p = i * width
    w = p >> 6
    off = p & 63
    v = words[w] >> np.uint64(off)
    if off + width > 64:
        v |= words[w + 1] << np.uint64(64 - off)
    return np.int64(v & ((_U1 << np.uint64(width)) - _U1))
