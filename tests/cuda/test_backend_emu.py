"""Matcher(index, "cuda") without a GPU: the CUDA backend's host code (cuda/backend.py and matcher.py's device
path: buffer sizing, pointer tables, the launches of either step, mask, post-filter) runs over a
CPU stand-in for CuPy (fake_cupy.py), and the kernels of gtm_step.cu and postfilter.cu run on the CUDA
emulation (cuda_emu.py), and so does the fused step (gtm_fused.cu) with small clusters. Everything must equal
the CPU matcher."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from gtmkit.matcher.matcher import Matcher
from gtmkit.matcher.options import CudaOptions
from gtmkit.matcher.cuda.sparse_req import Caps, sparse_images

from support.catalogs import random_user
from support.fake_cupy import installed
from support.step_cases import step_case
from support.indexes import MODES, _build

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")


# Sparse capacities that one of the test's requests exceeds (2 signatures), so that it takes the full GTM test and
# the others the sparse one: gtm_step.cu compiled with them ("multi-crowded", the static mode only, ~15 s a mode).
CROWDED = Caps(words=3, sigs=1, sig_words=8)
CROWDED_DEFINES = (f"SP_P={CROWDED.words}", f"SP_S={CROWDED.sigs}", f"SP_Q={CROWDED.sig_words}")


def _crowded_step(monkeypatch):
    """The fake-backed backend compiles gtm_step.cu at the CROWDED capacities and builds the requests' images at
    them (DeviceBatch)."""
    import gtmkit.matcher.cuda.backend as be
    load = be.load_module
    monkeypatch.setattr(be, "load_module", lambda path, defines=(): load(
        path, tuple(defines) + (CROWDED_DEFINES if path == be.KERNEL_FILE else ())))
    monkeypatch.setattr(be, "sparse_images", lambda q: sparse_images(q, CROWDED))


@pytest.mark.parametrize("path", ["multi", "multi-crowded", "fused"])
@pytest.mark.parametrize("mode,kw", MODES)
def test_step_mask_postfilter_equal_cpu(tmp_path, monkeypatch, mode, kw, path):
    """Both step paths of the backend: the multi-kernel one (also at small sparse capacities), and the fused
    one with clusters of 2 blocks of 256 threads (the backend's own launch, scratch sizing and pointer tables)."""
    if path != "multi" and mode != "static":
        pytest.skip("test_fused_emu.py runs the fused kernel in every mode; here its host side, once" if path == "fused"
                    else "the crowded configuration of the multi-kernel step runs the static mode only")
    idx, _, _ = _build(tmp_path, 72, mode, kw, n_ads=300, L=3, V=9)
    with installed(monkeypatch, fused_cluster=2 if path == "fused" else 0) as step:
        crowded = path == "multi-crowded"
        if crowded:
            _crowded_step(monkeypatch)
        cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda", **step)
        rng = np.random.default_rng(3)
        B = 3
        reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
        if crowded:
            ok = sparse_images(cpu.batch(reqs), CROWDED)["ok"]
            assert ok.any() and not ok.all(), ok  # both tests run
        flags = [(True, False), (False, False), (True, True)]  # (gtm, count) in turn
        n = 0
        for depth in range(idx.sid_length):
            for per_req, k, kind in [(6, 5, "normal"), (9, 40, "ties"), (4, 30, "wide")]:
                nodes, rr, lp, bs = step_case(idx, rng, B, per_req, depth, kind)
                gtm, count = flags[n % len(flags)]
                n += 1
                a = cpu.step(nodes, lp, bs, rr, reqs, k, gtm=gtm, count_candidates=count)
                b = gpu.step(nodes, lp, bs, rr, reqs, k, gtm=gtm, count_candidates=count)
                for name, x, y in zip(a._fields, a, b):
                    assert np.array_equal(x, np.asarray(y)), (depth, kind, name)
            assert np.array_equal(cpu.mask(nodes, rr, reqs, gtm), np.asarray(gpu.mask(nodes, rr, reqs, gtm)))
        if crowded:
            return  # the post-filter does not depend on the capacities
        leaves = rng.integers(idx.first_leaf - 2, idx.num_nodes, size=(B, 12))
        for exact, dtype in ((True, np.int64), (False, np.int64), (True, np.int32)):  # int32: the fused step's nodes
            got = gpu.postfilter(leaves.astype(dtype), reqs, exact)
            for (a1, r1), (a2, r2) in zip(cpu.postfilter(leaves, reqs, exact), got):
                assert np.array_equal(a1, np.asarray(a2)) and np.array_equal(r1, np.asarray(r2))


def test_postfilter_requests_with_many_codes(tmp_path, monkeypatch):
    """Requests whose Bloom attribute holds more codes than the GPU searches side by side (4): the post-filter
    goes through its code list in several rounds, with unknown codes among them; ads as on the CPU."""
    from support.catalogs import LOCATIONS
    idx, _, _ = _build(tmp_path, 73, "static", {"k": [2, 3, 2]}, n_ads=400, L=3, V=9)
    with installed(monkeypatch) as step:
        cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda", **step)
        rng = np.random.default_rng(4)
        reqs = []
        for n in (5, 7, 10):
            u = random_user(rng)
            u["location"] = [str(x) for x in rng.choice(LOCATIONS + ["XX:1", "ZZ"], size=n, replace=False)]
            reqs.append(idx.encode_request(u))
        leaves = rng.integers(idx.first_leaf - 2, idx.num_nodes, size=(len(reqs), 40))
        for (a1, r1), (a2, r2) in zip(cpu.postfilter(leaves, reqs, True), gpu.postfilter(leaves, reqs, True)):
            assert np.array_equal(a1, np.asarray(a2)) and np.array_equal(r1, np.asarray(r2))
        assert sum(len(a) for a, _ in cpu.postfilter(leaves, reqs, True)) > 0  # the test sees eligible ads


def test_postfilter_crowded_sids(tmp_path, monkeypatch):
    """SIDs holding many ads: a block's ads outnumber its threads (dealt in several rounds) and its shared memory
    (those past KEEP1 tested again when written); one SID repeated across a request's beams, dead entries between.
    Ads as on the CPU."""
    import gtmkit
    from support.catalogs import random_catalog, schema_dict, write
    table = random_catalog(74, n_ads=1500, L=3, V=9, n_sids=12)  # ~125 ads a SID
    sd = schema_dict(L=3, V=9)
    idx = gtmkit.build_index(write(tmp_path, table, sd), tmp_path / "crowded", partition="static", k=[2, 3, 2])
    counts = np.diff(np.asarray(idx.sid_ad_offsets))
    assert counts.max() > 64 and counts.sum() > 128
    with installed(monkeypatch) as step:
        cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda", **step)
        rng = np.random.default_rng(5)
        reqs = [idx.encode_request(random_user(rng)) for _ in range(3)]
        leaves = rng.integers(idx.first_leaf - 3, idx.num_nodes, size=(3, 40))
        leaves[1, :20] = idx.first_leaf + int(np.argmax(counts))
        want = cpu.postfilter(leaves, reqs, True)
        # again, after a launch of another shape: each launch must leave the kernel's state as it found it
        for lv, rq in ((leaves, reqs), (leaves[:2, :7], reqs[:2]), (leaves, reqs)):
            for (a1, r1), (a2, r2) in zip(cpu.postfilter(lv, rq, True), gpu.postfilter(lv, rq, True)):
                assert np.array_equal(a1, np.asarray(a2)) and np.array_equal(r1, np.asarray(r2))
        assert 0 < sum(len(a) for a, _ in want) < sum(int(counts[n - idx.first_leaf]) for n in leaves.ravel()
                                                      if n >= idx.first_leaf)  # some ads in, some out


def test_beam_search_fused_equals_cpu(tmp_path, monkeypatch):
    """The eager beam search over the fused step (clusters of 2), which tells the kernel its rows come best
    first: the same beams, scores and candidate counts as on the CPU, with and without GTM."""
    import gtmkit
    idx, _, _ = _build(tmp_path, 74, "static", {"k": [2, 3, 2]}, n_ads=300, L=3, V=9)
    with installed(monkeypatch, fused_cluster=2) as step:
        cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda", **step)
        rng = np.random.default_rng(5)
        reqs = [idx.encode_request(random_user(rng)) for _ in range(3)]
        table = np.log(rng.dirichlet(np.ones(idx.vocab_size), size=(3, 64))).astype(np.float32)

        def logits(xp):
            def fn(t, prev, parents):  # a fixed table per step, picked by the previous token
                p = np.asarray(prev)
                return xp.asarray(table[t][np.where(p >= 0, p, 0) % 64])
            return fn

        for gtm in (True, False):
            a = gtmkit.beam_search(cpu, reqs, logits(np), (1, 4, 6), gtm=gtm, count_candidates=True)
            b = gtmkit.beam_search(gpu, reqs, logits(gpu.xp), (1, 4, 6), gtm=gtm, count_candidates=True)
            for name in ("sids", "scores", "leaf_nodes", "candidates", "beams"):
                x, y = getattr(a, name), getattr(b, name)
                assert np.array_equal(np.asarray(x), np.asarray(y)), (gtm, name)


def test_step_settings_checked(tmp_path, monkeypatch):
    """CudaOptions: checked when made, with one-line errors; the fused step refused on a GPU without thread
    block clusters; "auto" takes the step the GPU has, and the options reach the backend."""
    from gtmkit.errors import GtmkitError
    idx, _, _ = _build(tmp_path, 75, "static", {"k": [2, 3, 2]}, n_ads=100, L=3, V=9)
    for bad, match in ((dict(step="flat"), "step must be"), (dict(cluster=9), "1 to 8"),
                       (dict(cluster=0), "1 to 8"), (dict(cluster=2.0), "an integer"),
                       (dict(threads=128), "256, 512 or 1024"), (dict(pdl="yes"), "pdl must be"),
                       (dict(gtm_windows="fast"), "gtm_windows"), (dict(gtm_windows=[-1]), "gtm_windows"),
                       (dict(gtm_windows=4096), "gtm_windows"), (dict(gtm_windows=["a"]), "gtm_windows")):
        with pytest.raises(GtmkitError, match=match) as e:
            CudaOptions(**bad)
        assert "\n" not in str(e.value)
    with pytest.raises(GtmkitError, match="options must be a gtmkit.CudaOptions"):
        Matcher(idx, "cpu", options={"step": "multi"})
    with pytest.warns(DeprecationWarning, match="cuda_step= -> CudaOptions"):  # the old keywords, for one release
        assert Matcher(idx, "cpu", cuda_step="multi").options == CudaOptions(step="multi")
    with pytest.raises(GtmkitError, match="cuda_step must be|step must be"):
        with pytest.warns(DeprecationWarning):
            Matcher(idx, "cpu", cuda_step="flat")
    with installed(monkeypatch):  # compute capability 8.0
        with pytest.raises(GtmkitError, match="compute capability 9.0") as e:
            Matcher(idx, "cuda", options=CudaOptions(step="fused"))
        assert "\n" not in str(e.value)
        assert not Matcher(idx, "cuda").cuda.fused
    with installed(monkeypatch, fused_cluster=3) as step:  # 9.0
        assert Matcher(idx, "cuda").cuda.fused and not Matcher(idx, "cuda", options=CudaOptions(step="multi")).cuda.fused
        be = Matcher(idx, "cuda", **step).cuda
        assert be.fused and (be.fused_cluster, be.fused_threads) == (3, 256)
