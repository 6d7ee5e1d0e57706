"""Each request's GTM rows as their non-zero words, in the byte layout of kernels/sparse_req.cuh's SparseReq:
the fused GPU step copies request b's image into shared memory and tests a partition with a few loads
instead of A x W + signatures x Wb (the same answers; sparse_req.cuh says why). Built on the host once per
batch (DeviceBatch), so no kernel spends a warp's round trips building it."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .arrays import RequestBatch


class Caps(NamedTuple):
    """Capacities: SP_A, SP_P, SP_NB, SP_S, SP_Q in sparse_req.cuh (the CPU emulation shrinks some)."""

    attrs: int = 16     # bitmask attributes
    words: int = 32     # non-zero bitmask request words, all attributes
    blooms: int = 4     # Bloom matchers
    sigs: int = 16      # signatures, all Bloom matchers
    sig_words: int = 64  # non-zero signature words, all signatures


def sparse_dtype(caps: Caps = Caps()) -> np.dtype:
    """SparseReq's fields in its order; u64 arrays first, so the packed numpy layout is the C struct's."""
    return np.dtype([("bm_m", "<u8", caps.words), ("bl_m", "<u8", caps.sig_words), ("bm_w", "<u4", caps.words),
                     ("bl_w", "<u4", caps.sig_words), ("bm_end", "<u4", caps.attrs), ("sig_end", "<u4", caps.sigs),
                     ("k_end", "<u4", caps.blooms), ("A", "<i4"), ("ok", "<i4")])


def sparse_images(q: RequestBatch, caps: Caps = Caps()) -> np.ndarray:
    """[B] SparseReq images; a request whose words do not fit gets ok = 0 (the kernel then runs the full test)."""
    B, A, _ = q.bitmask.shape
    nb = q.sig_off.shape[1] - 1
    out = np.zeros(B, sparse_dtype(caps))
    out["A"] = A
    for b in range(B):
        img = out[b]
        ok = A <= caps.attrs and nb <= caps.blooms
        n = 0
        for a in range(A if ok else 0):
            w = np.flatnonzero(q.bitmask[b, a])
            if n + len(w) > caps.words:
                ok = False
                break
            img["bm_w"][n:n + len(w)], img["bm_m"][n:n + len(w)] = w, q.bitmask[b, a, w]
            n += len(w)
            img["bm_end"][a] = n
        ns = ng = 0
        for k in range(nb if ok else 0):
            s0, s1 = int(q.sig_off[b, k]), int(q.sig_off[b, k + 1])
            if ns + s1 - s0 > caps.sigs:
                ok = False
                break
            for s in range(s0, s1):
                w = np.flatnonzero(q.sigs[s])
                if ng + len(w) > caps.sig_words:
                    ok = False
                    break
                img["bl_w"][ng:ng + len(w)], img["bl_m"][ng:ng + len(w)] = w, q.sigs[s, w]
                ng += len(w)
                img["sig_end"][ns] = ng
                ns += 1
            if not ok:
                break
            img["k_end"][k] = ns
        img["ok"] = ok
    return out
