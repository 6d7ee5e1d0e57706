"""The GPU matcher's kernels on hostile inputs without a GPU: the cases of gpu_input_cases.py (non-finite scores,
ids outside their ranges, rows out of order, non-leaves in the post-filter, threads) on the CUDA emulation of
cuda_emu.py behind fake_cupy.py, as in test_backend_emu.py; answers equal the plain-Python references and the
CPU matcher. The trie search's hostile proposals are in test_trie_gpu_emu.py."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from gtmkit.matcher.matcher import Matcher

from support import gpu_input_cases as cases
from support.fake_cupy import installed
from support.indexes import _build

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    idx, _, _ = _build(tmp_path_factory.mktemp("gpu_inputs"), 81, "static", {"k": [2, 3, 2]}, n_ads=250, L=3, V=9)
    return idx


@pytest.mark.parametrize("path", ["multi", "fused"])
def test_step_hostile_scores_and_ids(small_index, monkeypatch, path):
    """Both step paths (the fused one also reading int32 node ids as they are) and the mask kernel."""
    with installed(monkeypatch, fused_cluster=2 if path == "fused" else 0) as step:
        import cupy as cp
        cases.check_hostile_step(cp, small_index, Matcher(small_index, "cuda", **step), np.random.default_rng(5),
                                 path == "fused")


@pytest.mark.parametrize("path", ["multi", "fused"])
def test_step_rows_out_of_order_stay_in_bounds(small_index, monkeypatch, path):
    """On the emulation a stray access crashes the run or shows in the outputs, which are checked."""
    with installed(monkeypatch, fused_cluster=2 if path == "fused" else 0) as step:
        import cupy as cp
        cases.check_rows_out_of_order(cp, small_index, Matcher(small_index, "cuda", **step), np.random.default_rng(6))


def test_postfilter_non_leaves_are_padding(small_index, monkeypatch):
    """Leaf ids that are not leaves (internal nodes, -1, past the end) are padding in the post-filter."""
    with installed(monkeypatch) as step:
        import cupy as cp
        gpu = Matcher(small_index, "cuda", **step)
        cases.check_postfilter_padding(cp, small_index, Matcher(small_index, "cpu"), gpu, np.random.default_rng(7))


def test_threads_on_their_own_streams(small_index, monkeypatch):
    """Emulated launches run one at a time, interleaved between threads; with one set of scratch buffers for all
    streams a thread's kernels would read another's candidates."""
    with installed(monkeypatch) as step:
        import cupy as cp
        cases.check_threads(cp, small_index, Matcher(small_index, "cuda", **step), np.random.default_rng(8), True,
                            repeats=1)
