"""A batch uploaded by Matcher(index, "cuda") before a swap is stacked and uploaded again for the new index, without
a GPU (the fake CuPy and emulated kernels of test_backend_emu.py)."""

from __future__ import annotations

import shutil

import pytest

from gtmkit.matcher.matcher import Matcher

from support.fake_cupy import installed
from support.stale_cases import check_batch_across_swap

pytestmark = [pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed"), pytest.mark.emu]


def test_a_device_batch_uploaded_before_a_swap(tmp_path, monkeypatch):
    with installed(monkeypatch) as step:
        check_batch_across_swap(tmp_path, lambda idx: Matcher(idx, "cuda", **step))
