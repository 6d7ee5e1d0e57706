"""beam_score + logprob overflowing float32 on the GPU steps without a GPU: both step paths (the multi-kernel
gtm_step.cu and the fused gtm_fused.cu with clusters of 2) run on the CUDA emulation behind fake_cupy.py and must
equal the CPU step on scores near float32 max, rank a sum that overflows to +inf first, and keep such beams in a beam
search; host ids that are not integers and a graphed search's bad beam sizes are refused before any upload. The
device runs the same cases (test_overflow_gpu.py)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from gtmkit.matcher.matcher import Matcher

from support import overflow_cases as cases
from support.catalogs import random_user
from support.fake_cupy import installed
from support.indexes import _build

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    idx, _, _ = _build(tmp_path_factory.mktemp("overflow"), 81, "static", {"k": [2, 3, 2]}, n_ads=250, L=3, V=9)
    rng = np.random.default_rng(3)
    return idx, [idx.encode_request(random_user(rng)) for _ in range(3)]


@pytest.mark.parametrize("path", ["multi", "fused"])
def test_overflow_steps_equal_cpu(small_index, monkeypatch, path):
    idx, reqs = small_index
    with installed(monkeypatch, fused_cluster=2 if path == "fused" else 0) as step:
        cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda", **step)
        cases.check_overflow_steps(idx, cpu, gpu, reqs, np.random.default_rng(4), 12, (np.float32, np.float16))


@pytest.mark.parametrize("path", ["multi", "fused"])
def test_overflow_beam_search_equals_cpu(small_index, monkeypatch, path):
    idx, reqs = small_index
    with installed(monkeypatch, fused_cluster=2 if path == "fused" else 0) as step:
        cases.check_overflow_beam_search(idx, Matcher(idx, "cpu"), Matcher(idx, "cuda", **step), reqs, (1, 4, 6))


def test_host_ids_refused_before_upload(small_index, monkeypatch):
    idx, reqs = small_index
    with installed(monkeypatch) as step:
        cases.check_host_ids_refused(idx, Matcher(idx, "cuda", **step), reqs)


def test_graphed_search_beam_sizes_checked(small_index, monkeypatch):
    """GraphedBeamSearch's beam sizes are checked as beam_search's are (2.5 is no size, "a" no traceback), before
    anything is captured; they must start with 1."""
    from gtmkit.errors import GtmkitError
    idx, reqs = small_index
    with installed(monkeypatch) as step:
        from gtmkit.matcher.cuda.graph import GraphedBeamSearch
        gpu = Matcher(idx, "cuda", **step)
        for sizes, match in (((1, 2.5, 4), "positive integer"), ((1, "a", 4), "positive integer"),
                             ((1, 0, 4), "positive integer"), ((1, 4), "positive integer"), (5, "positive integer"),
                             ((2, 4, 4), "starting with 1")):
            with pytest.raises(GtmkitError, match=match) as e:
                GraphedBeamSearch(gpu, reqs, lambda t, prev, par: None, sizes)
            assert "\n" not in str(e.value)
