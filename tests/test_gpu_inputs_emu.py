"""The CUDA kernels on inputs a caller or a decoder may hand them, without a GPU (the CUDA emulation of
cuda_emu.py behind fake_cupy.py, as in test_backend_emu.py): non-finite scores (NaN ranks as -inf, +inf above
every finite score, a float32 sum that overflows likewise, in float32 and float16 log-probs), node ids that are
not internal nodes (dead rows), row_request values outside [0, B) (dead rows), leaf ids that are not leaves
(padding), a max_children below a row's out-degree; and the trie search's non-finite proposals and tokens that
no key holds. Answers equal the plain-Python references (gtmkit/testing.py, gtmkit/testing_trie.py); the cases
the CPU refuses (rows out of order) must still stay inside every array. The backend is called directly, below
the Matcher's host checks, as it is with device arrays."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from gtmkit.matcher.matcher import Matcher
from gtmkit.testing import mask_reference, step_reference

from catalogs import random_user
from fake_cupy import installed
from test_build import _build

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")

BIG = np.float32(3.0e38)  # two of them overflow float32


def hostile_scores(rng, R, V, dtype=np.float32):
    """(logprobs [R, V], beam_scores [R]): rounded normals with NaN, +inf, -inf and values whose sums overflow."""
    lp = np.round(rng.normal(size=(R, V)), 1).astype(np.float32)
    bs = np.round(rng.normal(size=R), 1).astype(np.float32)
    for v in (np.nan, np.inf, -np.inf, np.inf, BIG, -BIG):
        lp.flat[rng.integers(lp.size)] = v
    lp[rng.integers(R), :] = np.inf            # a row all +inf: ties broken by row and token
    bs[rng.choice(R, size=4, replace=False)] = [np.inf, np.nan, -np.inf, BIG]
    if dtype == np.float16:
        lp = lp.astype(np.float16)  # 3e38 -> inf
    return lp, bs


def bad_node_ids(idx, rng, R, dtype):
    """Node ids at random depths, a third of them not internal nodes: -1, other negatives, leaves, past the
    end, the dtype's extremes."""
    nodes = rng.integers(0, idx.first_leaf, size=R).astype(np.int64)
    info = np.iinfo(dtype)
    bad = np.array([-1, -7, idx.first_leaf, idx.num_nodes - 1, idx.num_nodes, idx.num_nodes + 3, info.max, info.min,
                    2**31 - 1], np.int64)
    pick = rng.random(R) < 0.35
    nodes[pick] = rng.choice(bad, size=int(pick.sum()))
    return nodes.astype(dtype)


def expected_step(idx, nodes, lp, bs, rr, reqs, k, gtm):
    """step_reference over the rows the rules leave live (internal node, row_request in [0, B))."""
    nodes = np.asarray(nodes, np.int64)
    live = (nodes >= 0) & (nodes < idx.first_leaf) & (rr >= 0) & (rr < len(reqs))
    with np.errstate(over="ignore", invalid="ignore"):
        return step_reference(idx, np.where(live, nodes, -1), lp.astype(np.float32), bs, np.where(live, rr, 0), reqs,
                              k, gtm)


def assert_step(got, want, k, counted):
    parent, token, node, score, count = (np.asarray(x) for x in got)
    for b, (par, tok, kid, sc, n) in enumerate(want):
        m = len(par)
        assert parent[b, :m].tolist() == par and np.all(parent[b, m:] == -1), b
        assert token[b, :m].tolist() == tok and node[b, :m].tolist() == kid, b
        assert np.array_equal(score[b, :m], np.array(sc, np.float32)) and np.all(score[b, m:] == -np.inf), b
        if counted:
            assert count[b] == n, b


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    idx, _, _ = _build(tmp_path_factory.mktemp("gpu_inputs"), 81, "static", {"k": [2, 3, 2]}, n_ads=250, L=3, V=9)
    return idx


@pytest.mark.parametrize("path", ["multi", "fused"])
def test_step_hostile_scores_and_ids(small_index, monkeypatch, path):
    """Both step paths on NaN / +inf / -inf / overflowing scores (float32 and float16 log-probs), node ids that
    are not internal nodes (int64 and, on the fused path, int32 as they are read), rows whose row_request lies
    outside [0, B) before and after the valid ones, k above the candidates: equal to the reference; the mask
    kernel on the same rows equals its reference."""
    idx = small_index
    rng = np.random.default_rng(5)
    with installed(monkeypatch, fused_cluster=2 if path == "fused" else 0):
        import cupy as cp
        gpu = Matcher(idx, "cuda")
        B = 3
        reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
        q = gpu.batch(reqs)
        D = int(max(idx.max_degree))
        cases = [(np.int64, np.float32, 4, True, True), (np.int32 if path == "fused" else np.int64, np.float16, 30,
                                                          False, True), (np.int64, np.float32, 7, True, False)]
        for id_dtype, lp_dtype, k, gtm, count in cases:
            per = 5
            rr = np.concatenate([[-3, -1], np.repeat(np.arange(B), per), [B, B + 5, 10**12]]).astype(np.int64)
            R = len(rr)
            nodes = bad_node_ids(idx, rng, R, id_dtype)
            lp, bs = hostile_scores(rng, R, idx.vocab_size, lp_dtype)
            code = 1 if lp_dtype == np.float16 else 0
            got = gpu.cuda.step(cp.asarray(nodes), cp.asarray(lp), code, cp.asarray(bs), cp.asarray(rr), None, q, k,
                                gtm, count, D)
            assert_step(got, expected_step(idx, nodes, lp, bs, rr, reqs, k, gtm), k, count or not gtm)
            nodes64 = nodes.astype(np.int64)
            mask = gpu.cuda.mask(cp.asarray(nodes64), cp.asarray(rr), q, gtm)
            live = (rr >= 0) & (rr < B)
            want = mask_reference(idx, np.where(live, nodes64, -1), np.where(live, rr, 0), reqs, gtm)
            assert np.array_equal(np.asarray(mask), want)


@pytest.mark.parametrize("path", ["multi", "fused"])
def test_step_rows_out_of_order_stay_in_bounds(small_index, monkeypatch, path):
    """row_request out of order on the device (which nothing checks there), and a max_children below the rows'
    out-degrees: the kernels must stay inside their arrays (on the emulation a stray access crashes the run or
    overwrites the inputs, compared after) and return well-formed rows; with max_children cut, each output is
    among its row's first max_children children."""
    idx = small_index
    rng = np.random.default_rng(6)
    with installed(monkeypatch, fused_cluster=2 if path == "fused" else 0):
        import cupy as cp
        gpu = Matcher(idx, "cuda")
        B, k = 3, 6
        reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
        q = gpu.batch(reqs)
        R = 14
        nodes = rng.integers(0, idx.first_leaf, size=R).astype(np.int64)
        lp, bs = hostile_scores(rng, R, idx.vocab_size)
        for rr, D in ((rng.integers(-2, B + 2, size=R), int(max(idx.max_degree))), (np.repeat(np.arange(B), [5, 5, 4]), 1)):
            keep = nodes.copy()
            got = [np.asarray(x) for x in gpu.cuda.step(cp.asarray(nodes), cp.asarray(lp), 0, cp.asarray(bs),
                                                        cp.asarray(rr.astype(np.int64)), None, q, k, True, False, D)]
            assert np.array_equal(nodes, keep)
            parent, token, node, score, _ = got
            ok = parent >= 0
            assert np.all((parent >= -1) & (parent < R)) and np.all(node[ok] > 0) and np.all(node[ok] < idx.num_nodes)
            assert np.all(node[~ok] == -1) and np.all(score[~ok] == -np.inf)
            for p, n, t in zip(parent[ok], node[ok], token[ok]):
                first = int(idx.node_offsets[nodes[p]])
                assert first + 1 <= n < first + 1 + min(D, int(idx.node_offsets[nodes[p] + 1]) - first)
                assert idx.child_tokens[n - 1] == t


@pytest.mark.parametrize("single", [True, False])
def test_postfilter_non_leaves_are_padding(small_index, monkeypatch, single):
    """Leaf ids below first_leaf, at or past num_nodes, and the int32 / int64 extremes are skipped like -1, in both
    forms of the post-filter: the ads equal the CPU's for the same leaves with those entries set to -1."""
    idx = small_index
    rng = np.random.default_rng(7)
    with installed(monkeypatch):
        import cupy as cp
        cpu, gpu = Matcher(idx, "cpu"), Matcher(idx, "cuda")
        gpu.cuda.post_single = single
        reqs = [idx.encode_request(random_user(rng)) for _ in range(3)]
        q = gpu.batch(reqs)
        for dtype in (np.int64, np.int32):
            info = np.iinfo(dtype)
            leaves = rng.integers(idx.first_leaf, idx.num_nodes, size=(3, 20)).astype(np.int64)
            bad = [idx.first_leaf - 1, 0, -5, idx.num_nodes, idx.num_nodes + 1, info.max, info.min]
            pick = rng.random(leaves.shape) < 0.4
            leaves[pick] = rng.choice(bad, size=int(pick.sum()))
            leaves.flat[rng.choice(leaves.size, size=len(bad), replace=False)] = bad  # each one at least once
            ads, rank, n = (np.asarray(x) for x in gpu.cuda.postfilter_padded(cp.asarray(leaves.astype(dtype)), q, True))
            clean = np.where((leaves >= idx.first_leaf) & (leaves < idx.num_nodes), leaves, -1)
            for b, (a1, r1) in enumerate(cpu.postfilter(clean, reqs, True)):
                assert np.array_equal(ads[b, :n[b]], a1) and np.array_equal(rank[b, :n[b]], r1)
            assert sum(int(x) for x in n) > 0  # the test sees eligible ads


def test_threads_on_their_own_streams(small_index, monkeypatch):
    """Three host threads sharing one GPU Matcher, each on its own stream, steps of different shapes and the
    post-filter interleaved launch by launch: each thread's answers equal a single-threaded run's (with one set of
    scratch buffers for all, a thread's kernels would read another's candidates)."""
    import threading
    from step_cases import step_case
    idx = small_index
    rng = np.random.default_rng(8)
    with installed(monkeypatch):
        import cupy as cp
        gpu = Matcher(idx, "cuda")
        reqs = [idx.encode_request(random_user(rng)) for _ in range(3)]
        work = []
        for w in range(3):
            steps = [step_case(idx, rng, 3, 4 + 2 * w, depth, "normal") for depth in range(idx.sid_length)]
            leaves = rng.integers(idx.first_leaf - 2, idx.num_nodes, size=(3, 6 + w))
            work.append((steps, leaves, 3 + 5 * w))

        def run(steps, leaves, k):
            out = []
            for nodes, rr, lp, bs in steps:
                out.append([np.asarray(x).copy() for x in gpu.step(nodes, lp, bs, rr, reqs, k, count_candidates=True)])
            out.append([np.asarray(x).copy() for x in gpu.postfilter_padded(leaves, reqs)])
            return out

        want = [run(*w) for w in work]
        got = [None] * len(work)

        def worker(i):
            with cp.cuda.Stream(non_blocking=True):
                got[i] = [run(*work[i]) for _ in range(2)]

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(work))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, runs in enumerate(got):
            assert runs is not None, i
            for run_out in runs:
                for a, b in zip(want[i], run_out):
                    ads = len(a) == 3  # the post-filter's (ads, rank, counts): compared up to each count
                    for x, y in zip(a, b):
                        if ads and x.ndim == 2:
                            assert all(np.array_equal(x[r, :n], y[r, :n]) for r, n in enumerate(a[2])), i
                        else:
                            assert np.array_equal(x, y), i
