"""GPU constrained beam search over the succinct trie equals the CPU search (and so the reference):
NAR and AR, thresholds, length normalisation, ties, labels >= 65536, BW above the number of candidates,
more candidates than one block sorts in shared memory, rows prepared on the host, CuPy inputs."""

from __future__ import annotations


import numpy as np
import pytest

from gtmkit._gpu import cuda_available

pytestmark = pytest.mark.gpu
if not cuda_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

import cupy as cp  # noqa: E402

from gtmkit.errors import GtmkitError  # noqa: E402
from gtmkit.trie.trie import SuccinctTrie  # noqa: E402
from gtmkit.trie import search_cuda as tsc  # noqa: E402
from gtmkit.trie.search import TrieBeamStepper, trie_beam_search, trie_beam_stepper  # noqa: E402
from gtmkit.synth.keys import synth_keys  # noqa: E402
from gtmkit.synth.proposals import synth_proposals  # noqa: E402

from support.tries import layout_trie, random_logp, random_settings, random_tokens, random_trie  # noqa: E402


def assert_same(got, want):
    ids, scores = cp.asnumpy(got[0]), cp.asnumpy(got[1])
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    assert np.array_equal(ids, want[0])
    np.testing.assert_allclose(scores, want[1], rtol=0, atol=1e-5)
    assert np.array_equal(np.isneginf(scores), np.isneginf(want[1]))


@pytest.mark.parametrize("seed", range(40))
def test_gpu_equals_cpu_on_random_tries(seed):
    rng = np.random.default_rng(seed)
    trie, _ = random_trie(rng, int(rng.integers(1, 40)))
    b, T, K = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 9))
    bw = int(rng.integers(1, 12))
    theta_tok, theta_sent, alpha = random_settings(rng, seed)
    tokens, logp = random_tokens(rng, (b, T, K)), random_logp(rng, (b, T, K), seed % 2 == 0)
    want = trie_beam_search(trie, tokens, logp, bw, theta_tok, theta_sent, alpha)
    got = trie_beam_search(trie, tokens, logp, bw, theta_tok, theta_sent, alpha, device="cuda")
    assert isinstance(got[0], np.ndarray) and isinstance(got[1], np.ndarray)  # host proposals, host results
    assert_same(got, want)


@pytest.mark.parametrize("params", [dict(), dict(theta_tok=-6.0, theta_sent=-14.0, alpha=0.5)])
def test_gpu_equals_cpu_on_synth_workload(params):
    trie = SuccinctTrie.build(synth_keys(200_000, seed=3))
    tokens, logp = synth_proposals(trie, 4, 8, 1000, seed=5)
    want = trie_beam_search(trie, tokens, logp, 1000, **params)
    got = trie_beam_search(trie, tokens, logp, 1000, device="cuda", **params)
    assert_same(got, want)
    assert (cp.asnumpy(got[0]) >= 0).sum() > 10  # the workload finds keys


def test_gpu_graph_replays_follow_inputs():
    """Host proposals run as one captured graph per (shape, trie, thresholds): replays use each call's
    proposals and alpha, and the capture itself works on this runtime."""
    rng = np.random.default_rng(4)
    trie, _ = random_trie(rng, 60)
    shape = (3, 5, 7)
    for i, (alpha, theta) in enumerate([(0.0, -np.inf), (1.0, -np.inf), (0.5, -np.inf), (0.5, -1.5), (0.5, -1.5)]):
        tokens, logp = random_tokens(rng, shape), random_logp(rng, shape, i % 2 == 0)
        got = trie_beam_search(trie, tokens, logp, 6, theta_tok=theta, alpha=alpha, device="cuda")
        assert_same(got, trie_beam_search(trie, tokens, logp, 6, theta_tok=theta, alpha=alpha))
    dev = tsc.cuda_device()
    assert dev.graph_error is None
    graphs = dev.buffers[(3, 6, 5, 7, 6)].graphs
    assert len(graphs) == 2 and all(g is not False for g in graphs.values())


@pytest.mark.parametrize("bw", [50, 1000, 3000, 5000])
def test_gpu_many_candidates(bw):
    """~10^4 candidates per step (radix select before the sort); BW above BEAM_CAP (per-beam data in
    global memory) and above SORT_CAP (the sort in global memory)."""
    rng = np.random.default_rng(bw)
    vocab = np.concatenate([np.arange(60), 65536 + np.arange(60)])
    pairs = [[int(a), int(c)] for a in vocab for c in vocab]
    triples = [[int(x) for x in rng.choice(vocab, 3)] for _ in range(5000)]
    trie = SuccinctTrie.build(pairs + triples)
    b, T = 2, 3
    tokens = np.stack([np.stack([rng.permutation(vocab) for _ in range(T)]) for _ in range(b)])
    logp = random_logp(rng, tokens.shape, ties=bw % 2 == 0)
    want = trie_beam_search(trie, tokens, logp, bw, alpha=0.7)
    assert_same(trie_beam_search(trie, tokens, logp, bw, alpha=0.7, device="cuda"), want)


def test_gpu_long_rows_prepared_on_host():
    rng = np.random.default_rng(1)
    trie, _ = random_trie(rng, 50)
    K = tsc.PREP_CAP + 904
    tokens, logp = random_tokens(rng, (2, 3, K)), random_logp(rng, (2, 3, K), True)
    want = trie_beam_search(trie, tokens, logp, 6, theta_tok=-1.0)
    assert_same(trie_beam_search(trie, tokens, logp, 6, theta_tok=-1.0, device="cuda"), want)


@pytest.mark.parametrize("dtypes", [(np.int64, np.float64), (np.int32, np.float32), (np.uint64, np.float16)])
def test_gpu_cupy_inputs(dtypes):
    rng = np.random.default_rng(2)
    trie, _ = random_trie(rng, 40)
    tokens = random_tokens(rng, (3, 4, 7)).astype(dtypes[0])  # -1 becomes 2^64-1 in uint64: no key
    logp = random_logp(rng, (3, 4, 7), False).astype(dtypes[1])
    want = trie_beam_search(trie, tokens, logp, 5, alpha=0.3)
    got = trie_beam_search(trie, cp.asarray(tokens), cp.asarray(logp), 5, alpha=0.3, device="cuda")
    assert_same(got, want)


def test_gpu_buffers_reused_across_shapes_and_streams():
    rng = np.random.default_rng(3)
    trie, _ = random_trie(rng, 40)
    cases = []
    for i in range(tsc.KEPT_SHAPES + 2):  # more shapes than kept: buffers are dropped and made again
        shape = (1 + i % 3, 2 + i, 5)
        cases.append((random_tokens(rng, shape), random_logp(rng, shape, i % 2 == 0), 3 + i))
    for _ in range(2):
        for tokens, logp, bw in cases:
            first = trie_beam_search(trie, tokens, logp, bw, device="cuda")
            with cp.cuda.Stream(non_blocking=True) as stream:
                again = trie_beam_search(trie, tokens, logp, bw, device="cuda")
                stream.synchronize()
            assert first[0] is not again[0]
            want = trie_beam_search(trie, tokens, logp, bw)
            assert_same(first, want)
            assert_same(again, want)


@pytest.mark.parametrize("seed", range(12))
def test_gpu_ar_stepper_equals_cpu(seed):
    rng = np.random.default_rng(50 + seed)
    trie, _ = random_trie(rng, int(rng.integers(1, 120)))
    b, T, K = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 9))
    bw = int(rng.integers(1, 7))
    theta_tok, theta_sent, alpha = random_settings(rng, seed)
    max_steps = T if seed % 3 == 0 else None
    tokens, logp = random_tokens(rng, (T, b, bw, K)), random_logp(rng, (T, b, bw, K), seed % 2 == 0)
    cpu = TrieBeamStepper(trie, b, bw, theta_tok, theta_sent, alpha, max_steps)
    gpu = trie_beam_stepper(trie, b, bw, theta_tok, theta_sent, alpha, max_steps, device="cuda")
    assert isinstance(gpu, tsc.TrieBeamStepperCuda)  # the public stepper dispatches to the GPU one
    for t in range(T):
        k = K if seed % 2 else int(rng.integers(1, K + 1))  # K may change between steps
        r = bw if seed % 4 < 2 else max(int(cpu.live.count.max()), 1)  # R between the live count and BW
        rows = (tokens[t, :, :r, :k], logp[t, :, :r, :k])
        cpu.step(*rows)
        if seed % 3 == 1:  # proposals already on the device
            rows = (cp.asarray(rows[0]), cp.asarray(rows[1]))
        gpu.step(*rows)
        for name in ("nodes", "scores", "parents", "tokens", "count"):
            assert np.array_equal(cp.asnumpy(getattr(gpu.live, name)), getattr(cpu.live, name)), (t, name)
        if t == T // 2:
            assert_same(gpu.result(), cpu.result())
    assert gpu.done == cpu.done
    assert_same(gpu.result(), cpu.result())


def test_gpu_ar_stepper_errors():
    trie = SuccinctTrie.build([[1, 2], [1, 3], [2, 5]])
    gpu = tsc.TrieBeamStepperCuda(trie, 1, 3, max_steps=1)
    gpu.step(np.array([[[1, 2]]]), np.float32([[[-0.5, -1.0]]]))
    with pytest.raises(GtmkitError, match="all 1 steps"):
        gpu.step(np.array([[[1, 2]]]), np.float32([[[-0.5, -1.0]]]))
    gpu = tsc.TrieBeamStepperCuda(trie, 1, 3)
    gpu.step(np.array([[[1, 2]]]), np.float32([[[-0.5, -1.0]]]))  # two live beams now
    with pytest.raises(GtmkitError, match="2 <= R <= 3"):
        gpu.step(np.array([[[1, 2]]]), np.float32([[[-0.5, -1.0]]]))


@pytest.mark.parametrize("params", [dict(), dict(theta_tok=-6.0, theta_sent=-14.0, alpha=0.5)])
def test_server_equals_cpu_on_synth_workload(params):
    """A resident TrieSearchServer answers a stream of queries as the CPU search does, while a plain GPU
    search runs beside it on the same trie; after close() the device synchronizes (the kernel ended)."""
    from gtmkit.trie.server_cuda import TrieSearchServer
    trie = SuccinctTrie.build(synth_keys(200_000, seed=3))
    tokens, logp = synth_proposals(trie, 12, 8, 1000, seed=7)
    with TrieSearchServer(trie, 1000, 8, 1000, **params) as srv:
        for q in range(12):
            want = trie_beam_search(trie, tokens[q:q + 1], logp[q:q + 1], 1000, **params)
            assert_same(srv.search(tokens[q], logp[q]), want)
            if q == 5:
                assert_same(trie_beam_search(trie, tokens[q:q + 1], logp[q:q + 1], 1000, device="cuda", **params),
                            want)
    cp.cuda.Device().synchronize()
    with pytest.raises(GtmkitError, match="closed"):
        srv.search(tokens[0], logp[0])


@pytest.mark.parametrize("seed", range(8))
def test_gpu_hostile_proposals_equal_reference(seed):
    """NaN, +inf, -inf and overflowing log-probs and tokens no key holds (support/trie_cases.py hostile), host and CuPy
    proposals: NAR and AR equal the plain-Python reference, and NAR the CPU search."""
    from support.trie_cases import check_reference, hostile_case
    trie, ref, nar, ar, bw, settings = hostile_case(200 + seed)
    check_reference(tsc.cuda_device(), trie, ref, nar, ar, bw, settings)
    want = trie_beam_search(trie, *nar, bw, *settings)
    assert_same(trie_beam_search(trie, *nar, bw, *settings, device="cuda"), want)
    assert_same(tsc.trie_beam_search_cuda(trie, *(cp.asarray(x) for x in nar), bw, *settings), want)


@pytest.mark.parametrize("cluster", [1, 3])
def test_gpu_other_cluster_sizes_equal_cpu(cluster):
    """cluster= thread blocks a query (1: the kernel GPUs before sm_90 run) for the NAR search, the AR stepper and
    the server: the CPU search's answers. A search of the default cluster size runs beside them."""
    from gtmkit.trie.server_cuda import TrieSearchServer
    hopper = int(cp.cuda.Device().compute_capability[:-1]) >= 9
    assert tsc.cuda_device(cluster).cl == (cluster if hopper else 1)
    rng = np.random.default_rng(70 + cluster)
    for seed in range(6):
        trie, _ = random_trie(rng, int(rng.integers(1, 60)))
        b, T, K = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 9))
        bw = int(rng.integers(1, 12))
        theta_tok, theta_sent, alpha = random_settings(rng, seed)
        tokens, logp = random_tokens(rng, (b, T, K)), random_logp(rng, (b, T, K), seed % 2 == 0)
        want = trie_beam_search(trie, tokens, logp, bw, theta_tok, theta_sent, alpha)
        assert_same(trie_beam_search(trie, tokens, logp, bw, theta_tok, theta_sent, alpha, device="cuda",
                                     cluster=cluster), want)
        assert_same(trie_beam_search(trie, tokens, logp, bw, theta_tok, theta_sent, alpha, device="cuda"), want)
        cpu = TrieBeamStepper(trie, b, bw, theta_tok, theta_sent, alpha)
        gpu = trie_beam_stepper(trie, b, bw, theta_tok, theta_sent, alpha, device="cuda", cluster=cluster)
        for t in range(T):
            rows = random_tokens(rng, (b, bw, K)), random_logp(rng, (b, bw, K), False)
            cpu.step(*rows)
            gpu.step(*rows)
            assert np.array_equal(cp.asnumpy(gpu.live.nodes), cpu.live.nodes), (seed, t)
        assert_same(gpu.result(), cpu.result())
        with TrieSearchServer(trie, bw, T, K, theta_tok, theta_sent, alpha, cluster=cluster) as srv:
            for q in range(b):
                want_q = trie_beam_search(trie, tokens[q:q + 1], logp[q:q + 1], bw, theta_tok, theta_sent, alpha)
                assert_same(srv.search(tokens[q], logp[q]), want_q)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["tails", "sid", "mixed"])
def test_gpu_label_layouts_equal_cpu(kind, seed):
    """Tries whose labels sit in the tail store, at 8 bits or in a constant level (each layout its own kernel
    build): NAR search, the AR stepper and the resident server equal the CPU search."""
    from gtmkit.trie.server_cuda import TrieSearchServer
    rng = np.random.default_rng(300 + seed)
    trie, _ = layout_trie(rng, kind, n=int(rng.integers(200, 20_000)))
    assert tsc.trie_layout(trie.arrays)  # not format 2's layout
    b, T, K, bw = 3, 10, 24, int(rng.integers(1, 64))
    tokens, logp = synth_proposals(trie, b, T, K, seed=seed)
    settings = random_settings(rng, seed) if seed % 2 else (-np.inf, -np.inf, 0.5)
    want = trie_beam_search(trie, tokens, logp, bw, *settings)
    assert_same(trie_beam_search(trie, tokens, logp, bw, *settings, device="cuda"), want)
    assert seed % 2 or (want[0] >= 0).sum() >= b  # without thresholds the proposals find keys
    cpu = TrieBeamStepper(trie, b, bw, *settings)
    gpu = trie_beam_stepper(trie, b, bw, *settings, device="cuda")
    for t in range(T):
        rows = (np.repeat(tokens[:, t:t + 1], bw, axis=1), np.repeat(logp[:, t:t + 1], bw, axis=1))
        cpu.step(*rows)
        gpu.step(*rows)
    assert_same(gpu.result(), cpu.result())
    with TrieSearchServer(trie, bw, T, K, *settings) as srv:
        for q in range(b):
            assert_same(srv.search(tokens[q], logp[q]), trie_beam_search(trie, tokens[q:q + 1], logp[q:q + 1], bw, *settings))
