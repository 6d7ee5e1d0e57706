"""Paused ads and swaps on Matcher(index, "cuda") without a GPU (the fake CuPy and emulated kernels of
test_backend_emu.py): the checks of support/pause_cases.py, in the multi-kernel and the fused step."""

from __future__ import annotations

import shutil

import pytest

from gtmkit.matcher.matcher import Matcher

from support.fake_cupy import installed
from support.indexes import _build
from support.pause_cases import check_pauses, check_swap, check_update

pytestmark = [pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed"), pytest.mark.emu]


@pytest.mark.parametrize("path", ["multi", "fused"])
def test_pauses_on_gpu_equal_cpu(tmp_path, monkeypatch, path):
    idx, table, _ = _build(tmp_path, 75, "static", {"k": [2, 3, 2]}, n_ads=160, L=3, V=9)
    with installed(monkeypatch, fused_cluster=2 if path == "fused" else 0) as step:
        # one step case a round (each emulated launch runs a CPU thread per CUDA thread); the GPU test runs more
        check_pauses(idx, table, Matcher(idx, "cpu"), Matcher(idx, "cuda", **step), cases=[(7, 9, "ties")])


def test_swap_on_gpu_serves_the_new_index(tmp_path, monkeypatch):
    """Matcher(index, "cuda").swap: the new index's tables uploaded beside the old ones."""
    old, _, _ = _build(tmp_path, 76, "static", {"k": [2, 3, 2]}, n_ads=200, L=3, V=9, name="a")
    new, _, _ = _build(tmp_path, 77, "static", {"k": [2, 3, 2]}, n_ads=200, L=3, V=9, name="b")
    with installed(monkeypatch) as step:
        check_swap(old, new, Matcher(old, "cuda", **step))


@pytest.mark.parametrize("path", ["multi", "fused"])
def test_updates_on_gpu_equal_cpu(tmp_path, monkeypatch, path):
    idx, table, _ = _build(tmp_path, 78, "dynamic", {"target_fill": 0.5, "k_max": 3}, n_ads=100, L=3, V=9)
    with installed(monkeypatch, fused_cluster=2 if path == "fused" else 0) as step:
        check_update(idx, table, Matcher(idx, "cpu"), Matcher(idx, "cuda", **step), changed=(8, 8, 2))
