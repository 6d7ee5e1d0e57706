"""The fused GPU step's slot images (gtmkit/matcher/slot_req.py, kernels/slot_req.cuh): the vectorized builder
must equal the plain one, and an image that fits must stand for exactly the request's rows and signatures."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmkit.matcher.slot_req import SLOTS, SlotCaps, slot_dtype, slot_images, slot_images_reference

from cuda_emu import KERNEL_DIR
from test_sparse_req import _batch

CAPS = [SlotCaps(), SlotCaps(sigs=2), SlotCaps(attrs=2, blooms=1)]


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**31), A=st.integers(1, 4), W=st.integers(1, 7), nb=st.integers(0, 3),
       Wb=st.integers(1, 6), density=st.sampled_from([0.0, 0.005, 0.02, 0.3]), caps=st.sampled_from(CAPS))
def test_slots_stand_for_the_request(seed, A, W, nb, Wb, density, caps):
    rng = np.random.default_rng(seed)
    q = _batch(rng, 6, A, W, nb, Wb, density)
    imgs = slot_images(q, caps)
    assert imgs.tobytes() == slot_images_reference(q, caps).tobytes()
    for b, img in enumerate(imgs):
        words = (q.bitmask[b] != 0).any(0)
        s0, s1 = q.sig_off[b, 0], q.sig_off[b, nb]
        kw = [(q.sigs[q.sig_off[b, k]:q.sig_off[b, k + 1]] != 0).any(0).sum() for k in range(nb)]
        fits = (A <= caps.attrs and nb <= caps.blooms and words.sum() <= SLOTS and s1 - s0 <= caps.sigs
                and all(x <= SLOTS for x in kw))
        assert bool(img["ok"]) == fits
        if not fits:
            continue
        bm = np.zeros((A, W), np.uint64)  # the rows the slots stand for
        for j in range(img["bm_n"]):
            bm[:, img["bm_w"][j]] = img["bm_m"][:A, j]
        assert np.array_equal(bm, q.bitmask[b])
        for k in range(nb):
            lo = img["k_end"][k - 1] if k else 0
            sig = np.zeros((img["k_end"][k] - lo, Wb), np.uint64)
            for j in range(img["bl_n"][k]):
                sig[:, img["bl_w"][k, j]] = img["bl_m"][lo:img["k_end"][k], j]
            assert np.array_equal(sig, q.sigs[q.sig_off[b, k]:q.sig_off[b, k + 1]])


def test_layout_matches_the_header():
    src = (KERNEL_DIR / "slot_req.cuh").read_text()
    caps = {m[0]: int(m[1]) for m in re.findall(r"#define (SL_[A-Z]+) (\d+)", src)}
    assert SlotCaps() == SlotCaps(caps["SL_A"], caps["SL_NB"], caps["SL_S"]) and caps["SL_W"] == SLOTS
    fields = re.search(r"struct SlotReq \{(.*?)\};", src, re.S).group(1)
    names = re.findall(r"(?:u64|u32|int) (\w+)", re.sub(r"//.*", "", fields)) + ["bm_n", "ok", "pad"]
    assert names == list(slot_dtype().names)
    c = SlotCaps()
    assert slot_dtype().itemsize == 8 * SLOTS * (c.attrs + c.sigs) + 4 * (SLOTS + c.blooms * SLOTS + 2 * c.blooms + 4)
