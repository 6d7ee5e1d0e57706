"""GPU matcher (CuPy) equals the CPU matcher: step, mask, postfilter, beam search, dtypes, torch, graphs."""

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
from gtmkit.synth.logits import SyntheticDecoder  # noqa: E402
from gtmkit.synth import synth_users, write_catalog  # noqa: E402

from support.catalogs import random_user  # noqa: E402
from support.step_cases import same_search, step_case  # noqa: E402
from support.indexes import MODES, _build  # noqa: E402


def _hopper() -> bool:
    return int(cp.cuda.Device().compute_capability[:-1]) >= 9


@pytest.fixture(autouse=True, params=["fused", "multi"])
def step_path(request):
    """Every test runs on both GPU step implementations (the fused one needs compute capability 9+): the tests'
    Matchers take it as CudaOptions(step=...)."""
    if request.param == "fused" and not _hopper():
        pytest.skip("the fused step needs a Hopper-class GPU")
    return request.param


def _same_step(a, b):
    for name, x, y in zip(a._fields, a, b):
        y = cp.asnumpy(y)
        assert np.array_equal(x, y), name


@pytest.mark.parametrize("mode,kw", MODES)
def test_step_mask_postfilter_equal_cpu(tmp_path, mode, kw, step_path):
    idx, _, _ = _build(tmp_path, 70, mode, kw, n_ads=400, L=3, V=9)
    cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda", options=CudaOptions(step=step_path))
    rng = np.random.default_rng(1)
    B = 4
    reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
    for depth in range(idx.sid_length):
        for per_req, k in [(6, 5), (9, 200), (1, 1)]:
            nodes, rr, lp, bs = step_case(idx, rng, B, per_req, depth)
            for gtm in (True, False):
                for count in (True, False):
                    a = cpu.step(nodes, lp, bs, rr, reqs, k, gtm=gtm, count_candidates=count)
                    b = gpu.step(nodes, lp, bs, rr, reqs, k, gtm=gtm, count_candidates=count)
                    _same_step(a, b)
                assert np.array_equal(cpu.mask(nodes, rr, reqs, gtm), cp.asnumpy(gpu.mask(nodes, rr, reqs, gtm)))
    leaves = rng.integers(idx.first_leaf - 2, idx.num_nodes, size=(B, 12))
    for exact in (True, False):
        for (a1, r1), (a2, r2) in zip(cpu.postfilter(leaves, reqs, exact), gpu.postfilter(leaves, reqs, exact)):
            assert np.array_equal(a1, cp.asnumpy(a2)) and np.array_equal(r1, cp.asnumpy(r2))


@pytest.mark.parametrize("cluster,threads", [(4, 512), (8, 256), (1, 1024)])
def test_fused_step_at_other_sizes_equals_cpu(tmp_path, step_path, cluster, threads):
    """The fused step compiled at other cluster and block sizes (Matcher's fused_cluster, fused_threads): the
    CPU's answers, the backend's launch and scratch sized by them."""
    if step_path == "multi":
        pytest.skip("settings of the fused step")
    idx, _, _ = _build(tmp_path, 74, "static", {"k": [2, 3, 2]}, n_ads=400, L=3, V=9)
    cpu = Matcher(idx, "cpu")
    gpu = Matcher(idx, "cuda", options=CudaOptions(step="fused", cluster=cluster, threads=threads))
    assert (gpu.cuda.fused_cluster, gpu.cuda.fused_threads) == (cluster, threads)
    rng = np.random.default_rng(6)
    reqs = [idx.encode_request(random_user(rng)) for _ in range(4)]
    for depth in range(idx.sid_length):
        for per_req, k in [(6, 5), (40, 200)]:
            nodes, rr, lp, bs = step_case(idx, rng, 4, per_req, depth)
            for gtm in (True, False):
                _same_step(cpu.step(nodes, lp, bs, rr, reqs, k, gtm=gtm, count_candidates=True),
                           gpu.step(nodes, lp, bs, rr, reqs, k, gtm=gtm, count_candidates=True))


def test_half_precision_and_torch_inputs(tmp_path, step_path):
    torch = pytest.importorskip("torch", reason="needs the hf extra: pip install 'gtmkit[hf]'")
    idx, _, _ = _build(tmp_path, 71, "static", {"k": [2, 3, 2]}, n_ads=400, L=3, V=9)
    cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda", options=CudaOptions(step=step_path))
    rng = np.random.default_rng(2)
    reqs = [idx.encode_request(random_user(rng)) for _ in range(3)]
    nodes, rr, lp, bs = step_case(idx, rng, 3, 7, 1)
    lp16 = lp.astype(np.float16)
    _same_step(cpu.step(nodes, lp16.astype(np.float32), bs, rr, reqs, 6),
               gpu.step(nodes, cp.asarray(lp16), bs, rr, reqs, 6))
    t_lp = torch.tensor(lp, device="cuda").to(torch.bfloat16)
    t_nodes, t_bs, t_rr = (torch.tensor(x, device="cuda") for x in (nodes, bs, rr))
    _same_step(cpu.step(nodes, t_lp.float().cpu().numpy(), bs, rr, reqs, 6),
               gpu.step(t_nodes, t_lp, t_bs, t_rr, reqs, 6))
    _same_step(cpu.step(nodes, lp, bs, rr, reqs, 6), gpu.step(t_nodes, torch.tensor(lp, device="cuda"), t_bs, t_rr, reqs, 6))


@pytest.fixture(scope="module")
def synth_index(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpuidx")
    cat, _ = write_catalog(d / "c.parquet", 30000, seed=5)
    return gtmkit.build_index(cat, d / "idx", partition="dynamic", target_fill=0.4, k_max=4)


def _host_decoder(users, V):
    dec = SyntheticDecoder(users, V, "peaked", 3)

    def fn(step, prev, parents):
        out = dec(step, cp.asnumpy(prev) if isinstance(prev, cp.ndarray) else prev,
                  cp.asnumpy(parents) if isinstance(parents, cp.ndarray) else parents)
        return cp.asarray(out) if isinstance(prev, cp.ndarray) else out

    return fn


def test_beam_search_equals_cpu(synth_index, step_path):
    idx = synth_index
    users = synth_users(idx.manifest["schema"], 5, seed=1)
    reqs = [idx.encode_request(u) for u in users]
    sizes = (1, 64, 128, 128)
    for gtm in (True, False):
        a = gtmkit.beam_search(Matcher(idx, "cpu"), reqs, _host_decoder(users, idx.vocab_size), sizes, gtm=gtm)
        b = gtmkit.beam_search(Matcher(idx, "cuda", options=CudaOptions(step=step_path)), reqs, _host_decoder(users, idx.vocab_size),
                               sizes, gtm=gtm)
        for name in ("sids", "scores", "leaf_nodes", "beams"):
            assert np.array_equal(getattr(a, name), cp.asnumpy(getattr(b, name))), name
        for (x1, r1), (x2, r2) in zip(a.ads, b.ads):
            assert np.array_equal(x1, cp.asnumpy(x2)) and np.array_equal(r1, cp.asnumpy(r2))


@pytest.mark.parametrize("pdl,recorded", [(False, False), (True, False), (True, True)])
def test_graph_replay_equals_eager(synth_index, pdl, recorded, step_path):
    """The fused step writes the token history itself (on Hopper); the multi-kernel one launches the reorder. pdl: the steps
    and post-filter kernels launched with programmatic dependent launch, after the decoder's kernels or
    (recorded: the logits of an earlier search, no kernel between the steps) right after each other;
    replayed often, since a kernel touching its predecessor's data too early would differ only now and then."""
    from gtmkit.matcher.cuda.graph import GraphedBeamSearch
    from gtmkit.synth.logits_cuda import GpuSyntheticDecoder

    idx = synth_index
    users = synth_users(idx.manifest["schema"], 4, seed=2)
    reqs = [idx.encode_request(u) for u in users]
    m = Matcher(idx, "cuda", options=CudaOptions(step=step_path))
    sizes = (1, 32, 64, 64)
    decoder = GpuSyntheticDecoder(users, idx.vocab_size, seed=4)
    if recorded:
        logits = []
        gtmkit.beam_search(m, reqs, lambda t, prev, par: logits.append(decoder(t, prev, par)) or logits[-1], sizes)
        decoder = lambda t, prev, par: logits[t]  # noqa: E731
    eager = gtmkit.beam_search(m, reqs, decoder, sizes)
    assert GraphedBeamSearch(m, reqs, decoder, sizes).pdl == m.cuda.fused  # the default
    g = GraphedBeamSearch(m, reqs, decoder if recorded else GpuSyntheticDecoder(users, idx.vocab_size, seed=4),
                          sizes, options=CudaOptions(step=step_path, pdl=pdl))
    assert g.pdl == (pdl and m.cuda.fused)
    for _ in range(20 if pdl else 2):
        same_search(g.replay(), eager)


def test_graph_gtm_windows(synth_index, step_path):
    """gtm_windows: calibrated from the warm-up ("auto", the default), the kernel's FIRST_WIN x k (None) and one
    candidate a step (every GTM step takes later rounds) all replay the eager answer; calibrated windows lie
    between k and FIRST_WIN x k; malformed windows are refused."""
    from gtmkit.errors import GtmkitError
    from gtmkit.matcher.cuda.graph import GraphedBeamSearch
    from gtmkit.synth.logits_cuda import GpuSyntheticDecoder
    from gtmkit.matcher.cuda.params import FUSED_FIRST_WIN

    idx = synth_index
    users = synth_users(idx.manifest["schema"], 4, seed=6)
    reqs = [idx.encode_request(u) for u in users]
    m = Matcher(idx, "cuda", options=CudaOptions(step=step_path))
    sizes = (1, 32, 64, 64)
    eager = gtmkit.beam_search(m, reqs, GpuSyntheticDecoder(users, idx.vocab_size, seed=4), sizes)
    for w in ("auto", None, [1] * len(sizes)):
        g = GraphedBeamSearch(m, reqs, GpuSyntheticDecoder(users, idx.vocab_size, seed=4), sizes,
                              options=CudaOptions(step=step_path, gtm_windows=w))
        r = g.replay()
        assert np.array_equal(cp.asnumpy(r.sids), cp.asnumpy(eager.sids)), w
        assert np.array_equal(cp.asnumpy(r.scores), cp.asnumpy(eager.scores)), w
        if w == "auto" and m.cuda.fused:
            ks = list(sizes[1:]) + [sizes[-1]]
            assert all(k <= x <= FUSED_FIRST_WIN * k for x, k in zip(g.windows, ks)), g.windows
    with pytest.raises(GtmkitError, match="gtm_windows"):  # one window a step
        GraphedBeamSearch(m, reqs, GpuSyntheticDecoder(users, idx.vocab_size, seed=4), sizes,
                          options=CudaOptions(step=step_path, gtm_windows=[1, 2]))


def test_pdl_off_by_option(synth_index, step_path):
    """CudaOptions(pdl=False): the graph launches plainly; the Matcher's options are the graph's default."""
    from gtmkit.matcher.cuda.graph import GraphedBeamSearch
    from gtmkit.synth.logits_cuda import GpuSyntheticDecoder

    idx = synth_index
    users = synth_users(idx.manifest["schema"], 2, seed=5)
    reqs = [idx.encode_request(u) for u in users]
    m = Matcher(idx, "cuda", options=CudaOptions(step=step_path, pdl=False))
    g = GraphedBeamSearch(m, reqs, GpuSyntheticDecoder(users, idx.vocab_size, seed=4), (1, 8, 16, 16))
    assert not g.pdl and g.pdl_off == "" and g.options == m.options


def test_eval_and_match_on_gpu_equal_cpu(synth_index, step_path):
    """The host-side synthetic decoder drives the GPU matcher: same figures as on the CPU."""
    if step_path == "multi":
        pytest.skip("evaluate and match build their Matcher with the default step (the fused one on Hopper)")
    from gtmkit.commands.match import match_user
    from gtmkit.evaluate import evaluate

    idx = synth_index
    users = synth_users(idx.manifest["schema"], 6, seed=3)
    cpu = evaluate(idx, users, (1, 32, 64, 64), device="cpu", recall_sample=2000)
    gpu = evaluate(idx, users, (1, 32, 64, 64), device="cuda", recall_sample=2000)
    for mode in ("cd", "gtm"):
        for key in ("pass_rate", "sid_precision", "ads_expanded_per_request", "surviving_candidates_per_step"):
            assert cpu[mode][key] == gpu[mode][key], (mode, key)
    assert gpu["recall"] == cpu["recall"] and gpu["recall"]["recall"] == 1.0
    a = match_user(idx, users[0], (1, 32, 64, 64), device="cpu")
    b = match_user(idx, users[0], (1, 32, 64, 64), device="cuda")
    assert a["top"] == b["top"] and a["eligible_ads"] == b["eligible_ads"]


@pytest.mark.parametrize("scores", ["ties", "rounded", "wide", "logits"])
def test_large_steps_equal_cpu(tmp_path, scores, step_path):
    """Hundreds of rows per request, k up to 2048, and score layouts that crowd one score bin (all
    equal: the radix-select path), spread far below the best (the last bin), or exceed 0 (logits)."""
    idx, _, _ = _build(tmp_path, 72, "dynamic", {"target_fill": 0.4, "k_max": 3}, n_ads=20000, L=3, V=48)
    cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda", options=CudaOptions(step=step_path))
    assert gpu.cuda.fused == (step_path == "fused")
    rng = np.random.default_rng(3)
    B = 5
    reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
    for depth in (1, 2):
        per_req = int(rng.integers(300, 700))
        nodes, rr, lp, bs = step_case(idx, rng, B, per_req, depth)
        if scores == "ties":
            lp[:] = -1.0
            bs[:] = 0.0
        elif scores == "wide":
            lp = (lp * 60).astype(np.float32)
        elif scores == "logits":
            lp = (np.abs(lp) * 5).astype(np.float32)
        for k in (1, 37, 1024, 2048):
            for gtm in (True, False):
                _same_step(cpu.step(nodes, lp, bs, rr, reqs, k, gtm=gtm),
                           gpu.step(nodes, lp, bs, rr, reqs, k, gtm=gtm))
        # int32 node ids straight from a previous step are accepted as they are
        _same_step(cpu.step(nodes, lp, bs, rr, reqs, 64), gpu.step(cp.asarray(nodes, cp.int32), lp, bs, rr, reqs, 64))


def test_uneven_requests_equal_cpu(tmp_path, step_path):
    """Requests with no rows, one row and many rows in one batch."""
    idx, _, _ = _build(tmp_path, 73, "static", {"k": [1, 3, 2]}, n_ads=3000, L=3, V=16)
    cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda", options=CudaOptions(step=step_path))
    rng = np.random.default_rng(4)
    reqs = [idx.encode_request(random_user(rng)) for _ in range(4)]
    counts = [0, 1, 900, 17]
    rr = np.repeat(np.arange(4), counts)
    nodes = rng.integers(idx.level_offsets[1], idx.level_offsets[2], size=len(rr))
    lp = rng.normal(size=(len(rr), idx.vocab_size)).astype(np.float32)
    bs = rng.normal(size=len(rr)).astype(np.float32)
    for k in (1, 100, 2048):
        _same_step(cpu.step(nodes, lp, bs, rr, reqs, k, count_candidates=True),
                   gpu.step(nodes, lp, bs, rr, reqs, k, count_candidates=True))


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    idx, _, _ = _build(tmp_path_factory.mktemp("gpu_inputs"), 81, "static", {"k": [2, 3, 2]}, n_ads=250, L=3, V=9)
    return idx


def test_hostile_inputs_equal_reference(small_index, step_path):
    """gpu_input_cases on the device: NaN / +inf / -inf / overflowing scores in float32 and float16, node ids that
    are not internal nodes (int32 as the fused step reads them, int64), row_request outside [0, B), rows out of
    order, max_children below the out-degrees, non-leaves in the post-filter."""
    from support import gpu_input_cases as cases
    cpu, gpu = Matcher(small_index, "cpu"), Matcher(small_index, "cuda", options=CudaOptions(step=step_path))
    rng = np.random.default_rng(5)
    cases.check_hostile_step(cp, small_index, gpu, rng, step_path == "fused")
    cases.check_rows_out_of_order(cp, small_index, gpu, rng)
    cases.check_postfilter_padding(cp, small_index, cpu, gpu, rng)


@pytest.mark.parametrize("own_streams", [True, False])
def test_threads_share_one_matcher(small_index, own_streams, step_path):
    """Four host threads calling one GPU Matcher at once, each on its own stream or all on the current one: every
    thread's answers equal a single-threaded run's."""
    from support import gpu_input_cases as cases
    cases.check_threads(cp, small_index, Matcher(small_index, "cuda", options=CudaOptions(step=step_path)), np.random.default_rng(8),
                        own_streams, workers=4, repeats=5)
