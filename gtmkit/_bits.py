"""Bit helpers for numba kernels: hardware popcount and row hashing on uint64 words."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
S30, S27, S31 = np.uint64(30), np.uint64(27), np.uint64(31)


@intrinsic
def popcount(typingctx, x):
    """Number of set bits of an integer (LLVM ctpop: one POPCNT instruction on x86-64)."""
    if not isinstance(x, types.Integer):
        return None
    sig = x(x)

    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.ctpop", [ir.IntType(x.bitwidth)])
        return builder.call(fn, args)

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def mix64(h):
    """splitmix64 finaliser: a cheap, well-spread 64-bit hash step."""
    h = (h ^ (h >> S30)) * MIX1
    h = (h ^ (h >> S27)) * MIX2
    return h ^ (h >> S31)


@njit(cache=True, nogil=True, inline="always")
def row_hash(row):
    h = GOLDEN
    for w in range(row.shape[0]):
        h = mix64(h ^ row[w])
    return h


@njit(cache=True, nogil=True)
def row_popcount(rows):
    """Set bits per row of a uint64 [n, W] array -> int64 [n]."""
    out = np.zeros(rows.shape[0], np.int64)
    for i in range(rows.shape[0]):
        c = 0
        for w in range(rows.shape[1]):
            c += popcount(rows[i, w])
        out[i] = c
    return out


@njit(cache=True, nogil=True, inline="always")
def lower_bound(a, lo, hi, x):
    """The first position in the ascending slice a[lo:hi] whose value is >= x (hi if none)."""
    while lo < hi:
        m = (lo + hi) >> 1
        if a[m] < x:
            lo = m + 1
        else:
            hi = m
    return lo


@njit(cache=True, nogil=True, inline="always")
def sorted_contains(codes, lo, hi, c):
    """Is c in the ascending slice codes[lo:hi]? (binary search)"""
    a = lower_bound(codes, lo, hi, c)
    return a < hi and codes[a] == c
