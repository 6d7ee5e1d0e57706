"""The fused GPU step's sparse request images (gtmkit/matcher/cuda/sparse_req.py, kernels/sparse_req.cuh): they must
hold exactly the non-zero words of every request row and signature, in the header's layout and capacities."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmkit.matcher.arrays import RequestBatch
from gtmkit.matcher.cuda.params import request_params
from gtmkit.matcher.cuda.sparse_req import Caps, sparse_dtype, sparse_images

from support.cuda_emu import KERNEL_DIR


def _batch(rng, B, A, W, nb, Wb, density):
    def words(shape):
        bits = rng.random(shape + (64,)) < density
        return (bits * (np.uint64(1) << np.arange(64, dtype=np.uint64))).sum(-1, dtype=np.uint64)
    counts = rng.integers(0, 4, size=(B, nb))
    flat = np.concatenate([[0], np.cumsum(counts.ravel())]).astype(np.int64)
    sig_off = flat[np.arange(B)[:, None] * nb + np.arange(nb + 1)[None, :]]  # request b's attribute k: [k, k+1)
    n = int(flat[-1])
    return RequestBatch(words((B, A, W)), sig_off, words((n, Wb)), np.zeros((B, nb + 1), np.int64),
                        np.zeros(0, np.int64))


def _dense(img, A, W, nb, Wb):
    """The rows an image stands for (its non-zero words, zeros elsewhere)."""
    bm = np.zeros((A, W), np.uint64)
    e = 0
    for a in range(A):
        for x in range(e, img["bm_end"][a]):
            bm[a, img["bm_w"][x]] = img["bm_m"][x]
        e = img["bm_end"][a]
    sigs, s, g = [], 0, 0
    for k in range(nb):
        per = []
        for s in range(s, img["k_end"][k]):
            row = np.zeros(Wb, np.uint64)
            for x in range(g, img["sig_end"][s]):
                row[img["bl_w"][x]] = img["bl_m"][x]
            g = img["sig_end"][s]
            per.append(row)
        s = img["k_end"][k]
        sigs.append(per)
    return bm, sigs


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), A=st.integers(1, 4), W=st.integers(1, 6), nb=st.integers(0, 3),
       Wb=st.integers(1, 5), density=st.sampled_from([0.0, 0.01, 0.05, 0.5]),
       caps=st.sampled_from([Caps(), Caps(words=3, sigs=2, sig_words=9), Caps(attrs=2, blooms=1)]))
def test_images_hold_exactly_the_nonzero_words(seed, A, W, nb, Wb, density, caps):
    rng = np.random.default_rng(seed)
    q = _batch(rng, 5, A, W, nb, Wb, density)
    imgs = sparse_images(q, caps)
    for b, img in enumerate(imgs):
        n_words = int((q.bitmask[b] != 0).sum())
        s0, s1 = q.sig_off[b, 0], q.sig_off[b, nb]
        n_sigs, n_sig_words = int(s1 - s0), int((q.sigs[s0:s1] != 0).sum())
        fits = (A <= caps.attrs and nb <= caps.blooms and n_words <= caps.words and n_sigs <= caps.sigs
                and n_sig_words <= caps.sig_words)
        assert bool(img["ok"]) == fits
        assert img["A"] == A
        if not fits:
            continue
        bm, sigs = _dense(img, A, W, nb, Wb)
        assert np.array_equal(bm, q.bitmask[b])
        for k in range(nb):
            want = q.sigs[q.sig_off[b, k]:q.sig_off[b, k + 1]]
            assert np.array_equal(np.array(sigs[k], np.uint64).reshape(-1, Wb), want)


def test_layout_matches_the_header():
    src = (KERNEL_DIR / "sparse_req.cuh").read_text()
    caps = {m[0]: int(m[1]) for m in re.findall(r"#define (SP_[A-Z]+) (\d+)", src)}
    assert Caps() == Caps(caps["SP_A"], caps["SP_P"], caps["SP_NB"], caps["SP_S"], caps["SP_Q"])
    fields = re.search(r"struct SparseReq \{(.*?)\};", src, re.S).group(1)
    names = re.findall(r"(?:u64|u32|int) (\w+)", re.sub(r"//.*", "", fields)) + ["ok"]  # "int A, ok;"
    assert names == list(sparse_dtype().names)
    c = Caps()
    assert sparse_dtype().itemsize == 8 * (c.words + c.sig_words) + 4 * (c.words + c.sig_words + c.attrs + c.sigs
                                                                         + c.blooms + 2)


def test_request_params_carry_the_images():
    q = _batch(np.random.default_rng(0), 2, 1, 1, 1, 1, 0.5)
    arrs = {n: getattr(q, n) for n in q._fields}
    arrs["sparse"] = sparse_images(q).view(np.uint64)
    p = request_params(q, lambda n: arrs[n].ctypes.data)
    assert p[6] == arrs["sparse"].ctypes.data


@pytest.mark.parametrize("caps", [Caps(), Caps(words=1)])
def test_a_request_over_capacity_takes_the_full_test(caps):
    q = RequestBatch(np.full((1, 2, 2), 3, np.uint64), np.zeros((1, 1), np.int64), np.zeros((0, 1), np.uint64),
                     np.zeros((1, 1), np.int64), np.zeros(0, np.int64))
    assert bool(sparse_images(q, caps)[0]["ok"]) == (caps.words >= 4)
