"""Random matcher-step inputs for the tests that compare a GPU step (device or emulated) with the CPU one."""

from __future__ import annotations

import numpy as np


def step_case(idx, rng, B, per_req, depth, kind="normal"):
    """-> (node_ids, row_request, logprobs, beam_scores): B requests of per_req rows of depth-`depth` nodes,
    a fifth of them dead (-1). kind "normal": rounded normal scores with one NaN and one -inf; "ties": few
    distinct scores (crowded bins, ties broken by row and token); "wide": scores over every score bin and
    below them."""
    lo, hi = idx.level_offsets[depth], idx.level_offsets[depth + 1]
    nodes = rng.integers(lo, hi, size=B * per_req)
    nodes[rng.random(len(nodes)) < 0.2] = -1
    rr = np.repeat(np.arange(B), per_req)
    if kind == "ties":
        lp = rng.choice(np.float32([0.0, -0.0, -0.5, -1.0]), size=(len(nodes), idx.vocab_size))
        bs = np.zeros(len(nodes), np.float32)
    elif kind == "wide":
        lp = np.round(rng.uniform(-90, 0, size=(len(nodes), idx.vocab_size)), 1).astype(np.float32)
        bs = np.zeros(len(nodes), np.float32)
    else:
        lp = np.round(rng.normal(size=(len(nodes), idx.vocab_size)), 1).astype(np.float32)
        lp.flat[rng.integers(lp.size)] = np.nan
        lp.flat[rng.integers(lp.size)] = -np.inf
        bs = np.round(rng.normal(size=len(nodes)), 1).astype(np.float32)
    return nodes, rr, lp, bs


def host(x):
    """A device array (CuPy's, which refuses implicit conversion) or a host one, as numpy."""
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)


def steps_agree(cpu, gpu, idx, rng, reqs, cases, flags, n=0, context=()):
    """Every depth's step cases (per_req, k, kind) on both matchers, (gtm, count) from flags in turn from the n-th:
    equal outputs. -> the next n."""
    for depth in range(idx.sid_length):
        for per_req, k, kind in cases:
            nodes, rr, lp, bs = step_case(idx, rng, len(reqs), per_req, depth, kind)
            gtm, count = flags[n % len(flags)]
            n += 1
            a = cpu.step(nodes, lp, bs, rr, reqs, k, gtm=gtm, count_candidates=count)
            b = gpu.step(nodes, lp, bs, rr, reqs, k, gtm=gtm, count_candidates=count)
            for name, x, y in zip(a._fields, a, b):
                assert np.array_equal(x, host(y)), (*context, depth, kind, gtm, count, name)
    return n


def same_search(graphed, eager) -> None:
    """A GraphedBeamSearch replay's GraphResult holds the eager beam_search Result's SIDs, scores, leaves and
    post-filtered ads (device or host arrays)."""
    for name in ("sids", "scores", "leaf_nodes"):
        assert np.array_equal(host(getattr(graphed, name)), host(getattr(eager, name))), name
    counts = host(graphed.ad_counts)
    for b, (ads, rank) in enumerate(eager.ads):
        assert counts[b] == len(ads)
        assert np.array_equal(host(graphed.ads[b, :counts[b]]), host(ads))
        assert np.array_equal(host(graphed.sid_rank[b, :counts[b]]), host(rank))
