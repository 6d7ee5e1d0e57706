"""Paused ads and swaps on the GPU matcher (CuPy): the checks of support/pause_cases.py, a captured CUDA graph
following pauses without a new capture, and threads searching on the GPU while another swaps and pauses."""

from __future__ import annotations

import numpy as np
import pytest

from gtmkit._gpu import cuda_available
from gtmkit.matcher.matcher import Matcher
from gtmkit.matcher.options import CudaOptions

pytestmark = pytest.mark.gpu
if not cuda_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

import cupy as cp  # noqa: E402

import gtmkit  # noqa: E402
from gtmkit.synth import synth_users, write_catalog  # noqa: E402

from support.indexes import _build  # noqa: E402
from support.pause_cases import check_pauses, check_swap, check_update, serve_while_swapping  # noqa: E402
from support.step_cases import same_search  # noqa: E402

STEPS = ["fused", "multi"] if int(cp.cuda.Device().compute_capability[:-1]) >= 9 else ["multi"]


@pytest.mark.parametrize("path", STEPS)
@pytest.mark.parametrize("mode,kw", [("static", {"k": [2, 3, 2]}), ("dynamic", {"target_fill": 0.5, "k_max": 3})])
def test_pauses_equal_cpu(tmp_path, path, mode, kw):
    idx, table, _ = _build(tmp_path, 75, mode, kw, n_ads=300, L=3, V=9)
    check_pauses(idx, table, Matcher(idx, "cpu"), Matcher(idx, "cuda", options=CudaOptions(step=path)))


@pytest.mark.parametrize("path", STEPS)
@pytest.mark.parametrize("mode,kw", [("static", {"k": [2, 3, 2]}), ("dynamic", {"target_fill": 0.5, "k_max": 3})])
def test_updates_equal_cpu(tmp_path, path, mode, kw):
    idx, table, _ = _build(tmp_path, 78, mode, kw, n_ads=300, L=3, V=9)
    check_update(idx, table, Matcher(idx, "cpu"), Matcher(idx, "cuda", options=CudaOptions(step=path)))


@pytest.mark.parametrize("path", STEPS)
def test_swap_serves_the_new_index(tmp_path, path):
    old, _, _ = _build(tmp_path, 76, "static", {"k": [2, 3, 2]}, n_ads=200, L=3, V=9, name="a")
    new, _, _ = _build(tmp_path, 77, "static", {"k": [2, 3, 2]}, n_ads=200, L=3, V=9, name="b")
    check_swap(old, new, Matcher(old, "cuda", options=CudaOptions(step=path)))


@pytest.mark.parametrize("path", STEPS)
def test_graph_follows_pauses_without_recapture(tmp_path, path):
    """A graph captured before any pause replays the eager search of the same matcher after each pause and
    resume: the ads of the SIDs it returned, paused, never come back, and their SIDs drop out."""
    from gtmkit.matcher.cuda.graph import GraphedBeamSearch
    from gtmkit.synth.logits_cuda import GpuSyntheticDecoder

    cat, _ = write_catalog(tmp_path / "c.parquet", 20000, seed=5)
    idx = gtmkit.build_index(cat, tmp_path / "idx", partition="static", k=[1, 4, 4, 2])
    users = synth_users(idx.manifest["schema"], 4, seed=2)
    reqs = [idx.encode_request(u) for u in users]
    m = Matcher(idx, "cuda", options=CudaOptions(step=path))
    sizes = (1, 32, 64, 64)
    g = GraphedBeamSearch(m, reqs, GpuSyntheticDecoder(users, idx.vocab_size, seed=4), sizes)
    before = gtmkit.beam_search(m, reqs, GpuSyntheticDecoder(users, idx.vocab_size, seed=4), sizes)
    same_search(g.replay(), before)
    leaves = [int(n) for n in cp.asnumpy(before.leaf_nodes[0])[:8] if n >= 0]
    gone = np.concatenate([idx.sid_ads(n) for n in leaves])
    ids = np.asarray(idx.ad_ids_sorted, np.int64)
    rng = np.random.default_rng(3)
    for op, pick in (("pause", gone), ("pause", rng.choice(ids, len(ids) // 3, replace=False)), ("resume", ids)):
        getattr(m, op + "_ads")(pick)
        r = g.replay()
        same_search(r, gtmkit.beam_search(m, reqs, GpuSyntheticDecoder(users, idx.vocab_size, seed=4), sizes))
        if op == "pause":
            assert not set(leaves) & set(cp.asnumpy(r.leaf_nodes).ravel().tolist())
            assert not set(gone.tolist()) & set(cp.asnumpy(r.ads).ravel().tolist())
    same_search(g.replay(), before)  # every ad active again


def test_searches_on_gpu_while_swapping_and_pausing(tmp_path):
    serve_while_swapping(tmp_path, "cuda", 10.0)
