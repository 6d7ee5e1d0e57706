"""The decoder integrations' CUDA kernels without a GPU: node recovery (matcher/cuda/kernels/prefix.cu) and the
in-place masking of a model's scores (integrations/kernels/sid_mask.cu) run through the CUDA emulation
(tests/support/cuda_emu.py) and must equal their numba forms exactly, on random prefixes and score widths."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import gtmkit
from gtmkit.integrations.masking import KERNEL as MASK_FILE
from gtmkit.integrations.masking import NEG_INF, block_scores_kernel

from support.cuda_emu import KERNEL_DIR, build_emulator, garbage, launch
from support.indexes import _build

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    return {name: build_emulator(tmp_path_factory.mktemp(name), Path(path), {})
            for name, path in (("prefix", KERNEL_DIR / "prefix.cu"), ("mask", MASK_FILE))}


@pytest.mark.parametrize("seed", range(3))
def test_prefix_nodes_kernel_equals_numba(tmp_path, emu, seed):
    index, _, _ = _build(tmp_path, seed, "none", {}, n_ads=80, L=3, V=6)
    m = gtmkit.Matcher(index)
    rng = np.random.default_rng(seed)
    lib, sigs = emu["prefix"]
    t = m.arrays
    for depth in range(index.sid_length + 2):
        R, start = 37, 2
        offsets = rng.integers(0, 4, max(depth, 1)).astype(np.int64)
        tokens = rng.integers(-1, index.vocab_size + 5, (R, start + depth)).astype(np.int64)
        real = rng.integers(index.first_leaf, index.num_nodes, R)
        for r in range(0, R, 2):  # half the rows are prefixes of real SIDs
            tokens[r, start:] = (list(index.leaf_sid(int(real[r]))) + [0])[:depth] + offsets[:depth]
        want = m.prefix_nodes(tokens, offsets, start=start)
        got = garbage(R, np.int64, rng)
        launch(lib, sigs, "prefix_nodes_kernel", (R + 63) // 64, 64, (
            t.node_offsets, t.child_tokens, np.int64(len(t.node_offsets) - 1), tokens, np.int64(tokens.shape[1]),
            np.int64(start), np.int32(depth), offsets, np.int64(index.vocab_size), np.int64(R), got))
        assert np.array_equal(got, want), depth
        if depth <= index.sid_length:  # the real prefixes were found
            assert (want >= 0).sum() >= R // 2


@pytest.mark.parametrize("dtype, name", [(np.float32, "float32"), (np.float16, "float16"), (np.float64, "float64")])
@pytest.mark.parametrize("eos_only, div", [(0, 1), (0, 4), (1, 1)])
def test_block_scores_kernel_equals_numba(emu, dtype, name, eos_only, div):
    rng = np.random.default_rng(7)
    lib, sigs = emu["mask"]
    R, C, V, offset, eos = 11, 75, 40, 5, 2
    words = rng.integers(0, 2**32, (R, (V + 31) // 32), dtype=np.uint32)
    nodes = rng.integers(-1, 3, R).astype(np.int64)
    scores = rng.normal(size=(R, C)).astype(dtype)
    want = scores.copy()
    block_scores_kernel(want.view(f"u{want.itemsize}"), NEG_INF[name], words, div, nodes, offset, V, eos, eos_only)
    got = scores.copy()
    launch(lib, sigs, "block_scores_kernel", ((C + 31) // 32, 4), 32, (
        got, np.int64(C), np.int32(got.itemsize), np.uint64(NEG_INF[name]), np.int64(R), np.int64(C), words,
        np.int32(words.shape[1]), np.int64(div), nodes, np.int64(offset), np.int64(V), np.int64(eos), np.int32(eos_only)))
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
    kept = np.isfinite(want)
    assert 0 < kept.sum() < R * C and np.array_equal(want[kept], scores[kept])


@pytest.mark.parametrize("mode, kw", [("static", {"k": [2, 3, 2]}), ("dynamic", {"target_fill": 0.3, "k_max": 4})])
def test_masker_on_the_device_path_equals_cpu(tmp_path, monkeypatch, mode, kw):
    """SidMasker of a device='cuda' Matcher (CuPy stand-in, kernels on the emulation): the root's two launches and
    the fused mask_scores_kernel below it write exactly what the CPU masker writes, EOS and dead rows included."""
    from gtmkit.integrations.layout import SidTokenLayout
    from gtmkit.integrations.masking import SidMasker

    from support.catalogs import random_user
    from support.fake_cupy import DevArray, installed

    index, _, _ = _build(tmp_path, 3, mode, kw, n_ads=120, L=3, V=6)
    rng = np.random.default_rng(4)
    reqs = [index.encode_request(random_user(rng)) for _ in range(3)]
    layout = SidTokenLayout([4, 10, 16], 24, eos_token_id=1)
    beams, L = 4, index.sid_length
    cpu = SidMasker(gtmkit.Matcher(index), reqs, beams, layout)
    with installed(monkeypatch):
        gpu = SidMasker(gtmkit.Matcher(index, device="cuda"), reqs, beams, layout)
        offs = np.array([4, 10, 16, 0])
        for depth in range(L + 2):
            R = len(reqs) * beams
            sid = rng.integers(-1, index.vocab_size + 1, (R, depth))
            real = rng.integers(index.first_leaf, index.num_nodes, R)
            for r in range(0, R, 2):
                sid[r] = (list(index.leaf_sid(int(real[r]))) + [0])[:depth]
            tokens = np.concatenate([np.zeros((R, 1), np.int64), sid + offs[:depth]], axis=1)
            for dtype in (np.float32, np.float16):
                scores = rng.normal(size=(R, layout.vocab_size)).astype(dtype)
                want = cpu(tokens, scores.copy(), 1)
                got = np.array(scores).view(DevArray)
                gpu(tokens, got, 1)
                assert np.array_equal(np.asarray(got).view(np.uint8), want.view(np.uint8)), (depth, dtype)
            if depth < L:
                assert np.isfinite(want).any()  # something was allowed: the comparison is not all -inf
