"""Inputs a caller or a decoder may hand the GPU matcher, and what must come back (the emulated tests in
test_gpu_inputs_emu.py and the device ones in test_matcher_gpu.py run the same cases): non-finite scores (NaN
ranks as -inf, +inf above every finite score, a float32 sum that overflows likewise, in float32 and float16
log-probs), node ids that are not internal nodes (dead rows), row_request values outside [0, B) (dead rows),
leaf ids that are not leaves (padding), a max_children below a row's out-degree, rows out of order, and host
threads sharing one Matcher. The backend is called directly, below the Matcher's host checks, as it is with
device arrays; `cp` is CuPy or tests/support/fake_cupy.py."""

from __future__ import annotations

import threading

import numpy as np

from gtmkit.testing.gtm import mask_reference, step_reference

from support.catalogs import random_user
from support.step_cases import step_case

BIG = np.float32(3.0e38)  # two of them overflow float32


def hostile_scores(rng, R, V, dtype=np.float32):
    """(logprobs [R, V], beam_scores [R]): rounded normals with NaN, +inf, -inf and values whose sums overflow;
    dtype float16, or "bf16" (bfloat16 bits as uint16, the high half of each float32)."""
    lp = np.round(rng.normal(size=(R, V)), 1).astype(np.float32)
    bs = np.round(rng.normal(size=R), 1).astype(np.float32)
    for v in (np.nan, np.inf, -np.inf, np.inf, BIG, -BIG):
        lp.flat[rng.integers(lp.size)] = v
    lp[rng.integers(R), :] = np.inf            # a row all +inf: ties broken by row and token
    bs[rng.choice(R, size=4, replace=False)] = [np.inf, np.nan, -np.inf, BIG]
    if dtype == np.float16:
        with np.errstate(over="ignore"):
            lp = lp.astype(np.float16)  # 3e38 -> inf
    elif dtype == "bf16":
        lp = (lp.view(np.uint32) >> 16).astype(np.uint16)
    return lp, bs


def as_float32(lp):
    """The log-probs as the kernels read them (bfloat16 bits widened, float16 converted)."""
    return (lp.astype(np.uint32) << 16).view(np.float32) if lp.dtype == np.uint16 else lp.astype(np.float32)


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
        return step_reference(idx, np.where(live, nodes, -1), as_float32(lp), bs, np.where(live, rr, 0), reqs, k, gtm)


def assert_step(cp, got, want, counted):
    parent, token, node, score, count = (cp.asnumpy(x) for x in got)
    for b, (par, tok, kid, sc, n) in enumerate(want):
        m = len(par)
        assert parent[b, :m].tolist() == par and np.all(parent[b, m:] == -1), b
        assert token[b, :m].tolist() == tok and node[b, :m].tolist() == kid, b
        assert np.array_equal(score[b, :m], np.array(sc, np.float32)) and np.all(score[b, m:] == -np.inf), b
        if counted:
            assert count[b] == n, b


def check_hostile_step(cp, idx, gpu, rng, int32_ids: bool):
    """The step on hostile scores (float32, float16 and bfloat16 log-probs) and ids (int64, and int32 when int32_ids), rows
    whose row_request lies outside [0, B) before and after the valid ones, k above the candidates: equal to the
    reference; the mask kernel on the same rows equals its reference."""
    B = 3
    reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
    q = gpu.batch(reqs)
    D = int(max(idx.max_degree))
    cases = [(np.int64, np.float32, 4, True, True), (np.int32 if int32_ids else np.int64, np.float16, 30, False, True),
             (np.int64, np.float32, 7, True, False), (np.int64, "bf16", 5, False, True)]
    for id_dtype, lp_dtype, k, gtm, count in cases:
        rr = np.concatenate([[-3, -1], np.repeat(np.arange(B), 5), [B, B + 5, 10**12]]).astype(np.int64)
        R = len(rr)
        nodes = bad_node_ids(idx, rng, R, id_dtype)
        lp, bs = hostile_scores(rng, R, idx.vocab_size, lp_dtype)
        code = {"bf16": 2, np.float16: 1}.get(lp_dtype, 0)
        got = gpu.cuda.step(cp.asarray(nodes), cp.asarray(lp), code, cp.asarray(bs), cp.asarray(rr), None, q, k, gtm,
                            count, D)
        assert_step(cp, got, expected_step(idx, nodes, lp, bs, rr, reqs, k, gtm), count or not gtm)
        nodes64 = nodes.astype(np.int64)
        mask = gpu.cuda.mask(cp.asarray(nodes64), cp.asarray(rr), q, gtm)
        live = (rr >= 0) & (rr < B)
        want = mask_reference(idx, np.where(live, nodes64, -1), np.where(live, rr, 0), reqs, gtm)
        assert np.array_equal(cp.asnumpy(mask), want)


def check_rows_out_of_order(cp, idx, gpu, rng):
    """row_request out of order on the device (which nothing checks there), and a max_children below the rows'
    out-degrees: the kernels stay inside their arrays and return well-formed rows; with max_children cut, each
    output is among its row's first max_children children."""
    B, k, R = 3, 6, 14
    reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
    q = gpu.batch(reqs)
    nodes = rng.integers(0, idx.first_leaf, size=R).astype(np.int64)
    lp, bs = hostile_scores(rng, R, idx.vocab_size)
    for rr, D in ((rng.integers(-2, B + 2, size=R), int(max(idx.max_degree))), (np.repeat(np.arange(B), [5, 5, 4]), 1)):
        got = gpu.cuda.step(cp.asarray(nodes), cp.asarray(lp), 0, cp.asarray(bs), cp.asarray(rr.astype(np.int64)),
                            None, q, k, True, False, D)
        parent, token, node, score, _ = (cp.asnumpy(x) for x in got)
        ok = parent >= 0
        assert np.all((parent >= -1) & (parent < R)) and np.all(node[ok] > 0) and np.all(node[ok] < idx.num_nodes)
        assert np.all(node[~ok] == -1) and np.all(score[~ok] == -np.inf)
        for p, n, t in zip(parent[ok], node[ok], token[ok]):
            first = int(idx.node_offsets[nodes[p]])
            assert first + 1 <= n < first + 1 + min(D, int(idx.node_offsets[nodes[p] + 1]) - first)
            assert idx.child_tokens[n - 1] == t


def check_postfilter_padding(cp, idx, cpu, gpu, rng):
    """Leaf ids below first_leaf, at or past num_nodes, and the int32 / int64 extremes are skipped like -1: the
    ads equal the CPU's for the same leaves with those entries set to -1."""
    reqs = [idx.encode_request(random_user(rng)) for _ in range(3)]
    q = gpu.batch(reqs)
    for dtype in (np.int64, np.int32):
        info = np.iinfo(dtype)
        leaves = rng.integers(idx.first_leaf, idx.num_nodes, size=(3, 20)).astype(np.int64)
        bad = [idx.first_leaf - 1, 0, -5, idx.num_nodes, idx.num_nodes + 1, info.max, info.min]
        pick = rng.random(leaves.shape) < 0.4
        leaves[pick] = rng.choice(bad, size=int(pick.sum()))
        leaves.flat[rng.choice(leaves.size, size=len(bad), replace=False)] = bad  # each one at least once
        ads, rank, n = (cp.asnumpy(x) for x in gpu.cuda.postfilter_padded(cp.asarray(leaves.astype(dtype)), q, True))
        clean = np.where((leaves >= idx.first_leaf) & (leaves < idx.num_nodes), leaves, -1)
        for b, (a1, r1) in enumerate(cpu.postfilter(clean, reqs, True)):
            assert np.array_equal(ads[b, :n[b]], a1) and np.array_equal(rank[b, :n[b]], r1)
        assert sum(int(x) for x in n) > 0  # the test sees eligible ads


def check_threads(cp, idx, gpu, rng, own_streams: bool, workers: int = 3, repeats: int = 2):
    """Host threads sharing one GPU Matcher, each on its own stream (own_streams) or all on the current one, steps
    of different shapes and the post-filter interleaved: each thread's answers equal a single-threaded run's."""
    reqs = [idx.encode_request(random_user(rng)) for _ in range(3)]
    work = []
    for w in range(workers):
        steps = [step_case(idx, rng, 3, 4 + 2 * w, depth, "normal") for depth in range(idx.sid_length)]
        leaves = rng.integers(idx.first_leaf - 2, idx.num_nodes, size=(3, 6 + w))
        work.append((steps, leaves, 3 + 5 * w))

    def run(steps, leaves, k):
        out = [[cp.asnumpy(x) for x in gpu.step(nodes, lp, bs, rr, reqs, k, count_candidates=True)]
               for nodes, rr, lp, bs in steps]
        ads, rank, n = (cp.asnumpy(x) for x in gpu.postfilter_padded(leaves, reqs))
        return out + [[a[:c] for a, c in zip(ads, n)], [r[:c] for r, c in zip(rank, n)]]

    want = [run(*w) for w in work]
    got = [None] * workers

    def worker(i):
        if own_streams:
            with cp.cuda.Stream(non_blocking=True):
                got[i] = [run(*work[i]) for _ in range(repeats)]
        else:
            got[i] = [run(*work[i]) for _ in range(repeats)]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, runs in enumerate(got):
        assert runs is not None, i  # the thread raised
        for one in runs:
            for a, b in zip(want[i], one):
                assert all(np.array_equal(x, y) for x, y in zip(a, b)), i
