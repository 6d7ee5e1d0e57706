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
