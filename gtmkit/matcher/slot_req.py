"""Each request's GTM rows as at most 4 words a matcher ("slots"), in the byte layout of kernels/slot_req.cuh's
SlotReq: the fused GPU step copies request b's image into shared memory and tests a partition from one round
of independent loads (slot_req.cuh says why). Built on the host once per batch (DeviceBatch)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .arrays import RequestBatch

SLOTS = 4  # SL_W in slot_req.cuh


class SlotCaps(NamedTuple):
    """Capacities: SL_A, SL_NB, SL_S in slot_req.cuh (the CPU emulation shrinks some)."""

    attrs: int = 16   # bitmask attributes
    blooms: int = 4   # Bloom matchers
    sigs: int = 16    # signatures, all Bloom matchers


def slot_dtype(caps: SlotCaps = SlotCaps()) -> np.dtype:
    """SlotReq's fields in its order; u64 arrays first, so the packed numpy layout is the C struct's."""
    return np.dtype([("bm_m", "<u8", (caps.attrs, SLOTS)), ("bl_m", "<u8", (caps.sigs, SLOTS)),
                     ("bm_w", "<u4", SLOTS), ("bl_w", "<u4", (caps.blooms, SLOTS)), ("bl_n", "<u4", caps.blooms),
                     ("k_end", "<u4", caps.blooms), ("A", "<i4"), ("bm_n", "<i4"), ("ok", "<i4"), ("pad", "<i4")])


def _slots_of(nz: np.ndarray):
    """nz bool [B, W] -> each row's non-zero columns' slot (their rank; -1 elsewhere) and count."""
    return np.where(nz, np.cumsum(nz, axis=1) - 1, -1), nz.sum(1)


def slot_images(q: RequestBatch, caps: SlotCaps = SlotCaps()) -> np.ndarray:
    """[B] SlotReq images; a request that needs more slots or signatures than fit gets ok = 0 (the kernel then
    runs the full test). Vectorized over the batch; slot_images_reference is the same, one request at a time."""
    B, A, W = q.bitmask.shape
    nb = q.sig_off.shape[1] - 1
    out = np.zeros(B, slot_dtype(caps))
    out["A"] = A
    ok = np.full(B, A <= caps.attrs and nb <= caps.blooms)
    slot, n = _slots_of((q.bitmask != 0).any(axis=1))
    ok &= n <= SLOTS
    out["bm_n"] = np.minimum(n, SLOTS)
    b, w = np.nonzero((slot >= 0) & (slot < SLOTS))
    out["bm_w"][b, slot[b, w]] = w
    if A <= caps.attrs:
        out["bm_m"][b, :A, slot[b, w]] = q.bitmask[b, :, w]
    s0 = q.sig_off[:, 0]
    ok &= q.sig_off[:, nb] - s0 <= caps.sigs
    for k in range(min(nb, caps.blooms)):
        cnt = q.sig_off[:, k + 1] - q.sig_off[:, k]
        req = np.repeat(np.arange(B), cnt)                     # each signature of matcher k: its request
        rows = (np.arange(len(req)) - np.concatenate([[0], np.cumsum(cnt)])[req]) + q.sig_off[req, k]
        used = np.zeros((B, q.sigs.shape[1]), bool)
        np.logical_or.at(used, req, q.sigs[rows] != 0)
        kslot, kn = _slots_of(used)
        ok &= kn <= SLOTS
        out["bl_n"][:, k] = np.minimum(kn, SLOTS)
        rb, rw = np.nonzero((kslot >= 0) & (kslot < SLOTS))
        out["bl_w"][rb, k, kslot[rb, rw]] = rw
        out["k_end"][:, k] = q.sig_off[:, k + 1] - s0
        local = rows - s0[req]
        i, c = np.nonzero(q.sigs[rows] != 0)
        fit = (local[i] < caps.sigs) & (kslot[req[i], c] >= 0) & (kslot[req[i], c] < SLOTS)
        i, c = i[fit], c[fit]
        out["bl_m"][req[i], local[i], kslot[req[i], c]] = q.sigs[rows[i], c]
    out["ok"] = ok
    return out


def slot_images_reference(q: RequestBatch, caps: SlotCaps = SlotCaps()) -> np.ndarray:
    """slot_images, plainly: one request, one attribute, one signature at a time."""
    B, A, W = q.bitmask.shape
    nb = q.sig_off.shape[1] - 1
    out = np.zeros(B, slot_dtype(caps))
    for b in range(B):
        img = out[b]
        img["A"] = A
        ok = A <= caps.attrs and nb <= caps.blooms
        words = [w for w in range(W) if any(q.bitmask[b, a, w] for a in range(A))]
        ok = ok and len(words) <= SLOTS
        img["bm_n"] = min(len(words), SLOTS)
        for j, w in enumerate(words[:SLOTS]):
            img["bm_w"][j] = w
            for a in range(min(A, caps.attrs) if A <= caps.attrs else 0):
                img["bm_m"][a, j] = q.bitmask[b, a, w]
        s0 = int(q.sig_off[b, 0])
        ok = ok and int(q.sig_off[b, nb]) - s0 <= caps.sigs
        for k in range(min(nb, caps.blooms)):
            rows = range(int(q.sig_off[b, k]), int(q.sig_off[b, k + 1]))
            words = [w for w in range(q.sigs.shape[1]) if any(q.sigs[s, w] for s in rows)]
            ok = ok and len(words) <= SLOTS
            img["bl_n"][k] = min(len(words), SLOTS)
            for j, w in enumerate(words[:SLOTS]):
                img["bl_w"][k, j] = w
                for s in rows:
                    if s - s0 < caps.sigs:
                        img["bl_m"][s - s0, j] = q.sigs[s, w]
            img["k_end"][k] = rows.stop - s0
        img["ok"] = ok
    return out
