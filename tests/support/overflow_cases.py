"""Scores near the float32 maximum, for the tests that hold the CPU step, the GPU steps (device or emulated) and the
reference to the contract "NaN ranks as -inf; +inf ranks above every finite score" where beam_score + logprob
overflows float32: a candidate whose sum is +inf ranks first, never dropped, on every path."""

from __future__ import annotations

import numpy as np

F32_MAX = np.finfo(np.float32).max
# 1e38 + 1e38 stays finite; 1e38 + 3e38 and 2e38 + 2e38 overflow; F32_MAX + 0 does not; -F32_MAX - 1e38 is -inf
NEAR_MAX = np.float32([1e38, 2e38, 3e38, F32_MAX, -1e38, -3e38, -F32_MAX, 0.0, -1.0, -0.5])


def overflow_case(idx, rng, B, per_req, depth):
    """-> (node_ids, row_request, logprobs, beam_scores): B requests of per_req rows at `depth` (a fifth dead) whose
    beam scores and log-probs are drawn from NEAR_MAX, so that many sums overflow to +inf, some reach above the best
    beam score (positive log-probs) and some overflow to -inf; each request's first row is live."""
    lo, hi = idx.level_offsets[depth], idx.level_offsets[depth + 1]
    nodes = rng.integers(lo, hi, size=B * per_req)
    nodes[rng.random(len(nodes)) < 0.2] = -1
    nodes[::per_req] = rng.integers(lo, hi, size=B)
    rr = np.repeat(np.arange(B), per_req)
    lp = rng.choice(NEAR_MAX, size=(len(nodes), idx.vocab_size)).astype(np.float32)
    bs = rng.choice(NEAR_MAX, size=len(nodes)).astype(np.float32)
    return nodes, rr, lp, bs


def one_overflow(idx, rng, depth):
    """One request whose rows all score finitely except one candidate: beam score 1e38 plus log-prob 3e38, which
    overflows to +inf (the other rows' candidates are finite, some above 1e38). -> (nodes, rr, lp, bs, row, token):
    the +inf candidate must come first."""
    lo, hi = idx.level_offsets[depth], idx.level_offsets[depth + 1]
    nodes = np.arange(lo, hi)[:6]
    R = len(nodes)
    rr = np.zeros(R, np.int64)
    lp = rng.uniform(-3, 0, size=(R, idx.vocab_size)).astype(np.float32)
    bs = np.float32([3e38] + [1e38] * (R - 1)) if R > 1 else np.float32([1e38])
    lp[0, :] = np.float32(-1.0)  # row 0: the best beam score, finite candidates just below it
    row = R - 1
    toks, _ = idx.children(int(nodes[row]))
    token = int(toks[-1])
    lp[row, token] = np.float32(3e38)  # 1e38 + 3e38 = +inf in float32
    return nodes, rr, lp, bs, row, token


def _host(x):
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)


def check_overflow_steps(idx, cpu, gpu, reqs, rng, n: int, lp_dtypes=(np.float32,)):
    """n random steps of NEAR_MAX scores at every depth (k from 1 to 11, GTM and counting in turn, rows said to come
    best first or not): the GPU step equals the CPU step, field by field, for each log-prob dtype (float16 turns the
    large values into +-inf before the sum); then the single overflow (1e38 + 3e38) comes first on both."""
    for i in range(n):
        depth = i % idx.sid_length
        nodes, rr, lp, bs = overflow_case(idx, rng, len(reqs), int(rng.integers(1, 9)), depth)
        k = int(rng.integers(1, 12))
        gtm, count = bool(i % 2), i % 3 == 0
        for dt in lp_dtypes:
            with np.errstate(over="ignore"):
                lpd = lp.astype(dt)
            want = cpu.step(nodes, lpd.astype(np.float32), bs, rr, reqs, k, gtm=gtm, count_candidates=count)
            got = gpu.step(nodes, lpd, bs, rr, reqs, k, gtm=gtm, count_candidates=count, rows_best_first=i % 4 == 0)
            for name, x, y in zip(want._fields, want, got):
                assert np.array_equal(x, _host(y)), (i, np.dtype(dt).name, name)
    req = [idx.encode_request({})]
    for depth in range(idx.sid_length):
        nodes, rr, lp, bs, row, token = one_overflow(idx, rng, depth)
        for rbf in (False, True):
            got = gpu.step(nodes, lp, bs, rr, req, 3, gtm=False, rows_best_first=rbf)
            want = cpu.step(nodes, lp, bs, rr, req, 3, gtm=False)
            assert (int(_host(got.parent_rows)[0, 0]), int(_host(got.tokens)[0, 0])) == (row, token), (depth, rbf)
            assert _host(got.scores)[0, 0] == np.inf
            for name, x, y in zip(want._fields, want, got):
                assert np.array_equal(x, _host(y)), (depth, rbf, name)


def overflow_logits(idx, xp, big=np.float32(2e38)):
    """A decoder for beam_search whose tokens 0 and 1 score `big` (two of them overflow float32 to +inf), others
    -1, as xp arrays (numpy or CuPy)."""
    def fn(step, prev, parents):
        lp = np.full((int(prev.shape[0]), idx.vocab_size), -1.0, np.float32)
        lp[:, :2] = big
        return xp.asarray(lp)
    return fn


def check_overflow_beam_search(idx, cpu, gpu, reqs, sizes):
    """beam_search over the overflowing decoder: the GPU's beams, scores and leaves equal the CPU's, GTM on and off;
    the +inf SIDs come first."""
    import gtmkit
    for gtm in (True, False):
        a = gtmkit.beam_search(cpu, reqs, overflow_logits(idx, np), sizes, gtm=gtm)
        b = gtmkit.beam_search(gpu, reqs, overflow_logits(idx, gpu.xp), sizes, gtm=gtm)
        for name in ("sids", "scores", "leaf_nodes", "beams"):
            assert np.array_equal(_host(getattr(a, name)), _host(getattr(b, name))), (gtm, name)
        if not gtm:
            assert (_host(b.scores)[:, 0] == np.inf).all()


def check_host_ids_refused(idx, gpu, reqs):
    """Host ids that are not integers (strings, ints past 64 bits, ragged lists) handed to a GPU Matcher: one
    GtmkitError line naming the argument, raised before anything is uploaded, as on the CPU."""
    import pytest
    from gtmkit.errors import GtmkitError

    def one_line(fn, what):
        with pytest.raises(GtmkitError) as e:
            fn()
        assert what in str(e.value) and "\n" not in str(e.value), str(e.value)

    lp = np.zeros((1, idx.vocab_size), np.float32)
    for bad in ([2**64], ["a"], [[0], [0, 1]], 2**64):
        one_line(lambda: gpu.step(bad, lp, [0.0], [0], reqs[:1], 3), "node_ids")
        one_line(lambda: gpu.step([0], lp, [0.0], bad, reqs[:1], 3), "row_request")
        one_line(lambda: gpu.mask(bad, [0], reqs[:1]), "node_ids")
        one_line(lambda: gpu.mask([0], bad, reqs[:1]), "row_request")
        one_line(lambda: gpu.prefix_nodes([bad] if not isinstance(bad, list) else bad), "tokens")
    one_line(lambda: gpu.step([0], lp, ["a"], [0], reqs[:1], 3), "beam_scores")
    one_line(lambda: gpu.step([0], [["a"] * idx.vocab_size], [0.0], [0], reqs[:1], 3), "logprobs")
    one_line(lambda: gpu.prefix_nodes([[0, 0]], offsets=2**64), "offsets")
