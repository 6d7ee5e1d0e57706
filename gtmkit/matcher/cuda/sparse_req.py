"""Each request's GTM rows as their non-zero words, in the byte layout of kernels/sparse_req.cuh's SparseReq:
the fused GPU step copies request b's image into shared memory and tests a partition with a few loads
instead of A x W + signatures x Wb (the same answers; sparse_req.cuh says why). Built on the host once per
batch (DeviceBatch), so no kernel spends a warp's round trips building it."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..arrays import RequestBatch


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
    """[B] SparseReq images; a request whose words do not fit gets ok = 0 (the kernel then runs the full test).
    Vectorized over the batch: the host builds them for every batch."""
    B, A, _ = q.bitmask.shape
    nb = q.sig_off.shape[1] - 1
    out = np.zeros(B, sparse_dtype(caps))
    out["A"] = A
    ok = np.full(B, A <= caps.attrs and nb <= caps.blooms)
    # bitmask: non-zero words in (attribute, word) order per request
    b, a, w = np.nonzero(q.bitmask)
    n_b = np.bincount(b, minlength=B)
    pos = np.arange(len(b)) - np.concatenate([[0], np.cumsum(n_b)])[b]
    ok &= n_b <= caps.words
    keep = pos < caps.words
    out["bm_w"][b[keep], pos[keep]] = w[keep]
    out["bm_m"][b[keep], pos[keep]] = q.bitmask[b[keep], a[keep], w[keep]]
    per_attr = np.zeros((B, A), np.int64)
    np.add.at(per_attr, (b, a), 1)
    out["bm_end"][:, :min(A, caps.attrs)] = np.cumsum(per_attr, axis=1)[:, :caps.attrs]
    # Bloom: request b's signatures are sigs[sig_off[b, 0]:sig_off[b, nb]], matcher by matcher
    s0 = q.sig_off[:, 0]
    n_sigs = q.sig_off[:, nb] - s0
    ok &= n_sigs <= caps.sigs
    out["k_end"][:, :min(nb, caps.blooms)] = (q.sig_off[:, 1:] - s0[:, None])[:, :caps.blooms]
    req_of = np.repeat(np.arange(B), n_sigs)                      # each request signature's request
    sig_rows = np.concatenate([np.arange(x, y) for x, y in zip(s0, s0 + n_sigs)]) if B else np.zeros(0, np.int64)
    local = np.arange(len(sig_rows)) - np.concatenate([[0], np.cumsum(n_sigs)])[req_of]
    nz = q.sigs[sig_rows] != 0 if len(sig_rows) else np.zeros((0, q.sigs.shape[1]), bool)
    per_sig = nz.sum(1)
    n_g = np.bincount(req_of, weights=per_sig, minlength=B).astype(np.int64)
    ok &= n_g <= caps.sig_words
    first_g = np.concatenate([[0], np.cumsum(n_g)])[req_of]       # the request's first word, per signature
    ends = np.cumsum(per_sig) - first_g                           # sig_end of each signature, within its request
    fit = local < caps.sigs
    out["sig_end"][req_of[fit], local[fit]] = ends[fit]
    r, c = np.nonzero(nz)                                         # (request signature, word), in order
    gb = req_of[r]
    gpos = np.arange(len(r)) - np.concatenate([[0], np.cumsum(n_g)])[gb]
    keep = gpos < caps.sig_words
    out["bl_w"][gb[keep], gpos[keep]] = c[keep]
    out["bl_m"][gb[keep], gpos[keep]] = q.sigs[sig_rows[r[keep]], c[keep]]
    out["ok"] = ok
    return out
