"""Beam search over SIDs with per-step beam sizes (GRACE §3.3), CD+GTM at every step, post-filter."""

from __future__ import annotations

import time
from typing import Callable, NamedTuple, Optional

import numpy as np

from ..errors import GtmkitError
from .._args import beam_sizes_arg, bool_arg, check_search_memory


class Result(NamedTuple):
    """sids int32 [B, M, L] and leaf_nodes int32 [B, M] (-1 padded), scores float32 [B, M] (-inf padded),
    ads: post-filter output (per request (ad_ids int64, sid_rank int32)) or None,
    candidates int64 [L, B]: candidates that survived CD(+GTM) at each step (-1: not counted),
    beams int64 [L, B]: beams kept after each step's top-k, seconds: wall time per step, version: the index
    version that answered."""

    sids: np.ndarray
    scores: np.ndarray
    leaf_nodes: np.ndarray
    ads: Optional[list]
    candidates: np.ndarray
    beams: np.ndarray
    seconds: np.ndarray
    version: str = None


def as_numpy(x) -> np.ndarray:
    """numpy view of an array-like; CPU torch tensors come through DLPack without a copy; CuPy arrays
    are copied to the host."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__cuda_array_interface__"):  # device memory: copy to the host
        return x.get() if hasattr(x, "get") else x.detach().cpu().numpy()
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (TypeError, RuntimeError, BufferError):
            pass
    return np.asarray(x)


def beam_search(matcher, requests, logits_fn: Callable, beam_sizes=(1, 512, 1024, 1024), gtm: bool = True,
                postfilter: bool = True, count_candidates: bool = False) -> Result:
    """Decode every request's best SIDs under CD (+GTM).

    logits_fn(step, prev_tokens int32 [R], parent_rows int32 [R]) -> log-probs [R, V]: the decoder
    first reorders its state by parent_rows (row of the previous step each row extends; -1 for a
    dead row, whose output is ignored), then feeds prev_tokens. Step 0 has one start row per request
    (prev_tokens -1, parent_rows = request number) whatever beam_sizes[0] says: a wider start beam would
    hold copies of that row, so (M,) * L is the same search as (1, M, ..., M), as generate(num_beams=M)
    does. Step t runs on beam_sizes[t] rows per request and keeps beam_sizes[t+1]; the last step keeps
    beam_sizes[-1] SIDs."""
    if hasattr(matcher, "current"):
        matcher = matcher.current()  # the whole search on one index: a swap meanwhile serves the next one
    index = matcher.index
    L = index.sid_length
    sizes = beam_sizes_arg(beam_sizes, L)
    gtm, postfilter = bool_arg(gtm, "gtm"), bool_arg(postfilter, "postfilter")
    count_candidates = bool_arg(count_candidates, "count_candidates")
    if not callable(logits_fn):
        raise GtmkitError(f"logits_fn must be callable, got {type(logits_fn).__name__}")
    q = matcher.batch(requests)
    xp = matcher.xp
    gpu = xp is not np
    B = q.size
    if not gpu:
        check_search_memory(B, sizes, index.vocab_size)
    node_ids = xp.zeros(B, xp.int32)
    scores = xp.zeros(B, xp.float32)
    prev = xp.full(B, -1, xp.int32)
    parents = xp.arange(B, dtype=xp.int32)
    history = xp.zeros((B, 0), xp.int32)  # tokens so far, one row per live row
    candidates = xp.full((L, B), -1, xp.int64)
    beams = xp.zeros((L, B), xp.int64)
    seconds = np.zeros(L)  # host wall time per step (on the GPU: launch time, the device runs ahead)
    for t in range(L):
        t0 = time.perf_counter()
        logprobs = logits_fn(t, prev, parents)
        k = sizes[t + 1] if t + 1 < L else sizes[-1]
        st = matcher.step(node_ids, logprobs if gpu else as_numpy(logprobs), scores,
                          xp.repeat(xp.arange(B, dtype=xp.int32), len(node_ids) // max(B, 1)), q, k, gtm=gtm,
                          count_candidates=count_candidates, max_children=int(index.max_degree[t]),
                          rows_best_first=True)  # one start row a request, then each step's ranked output
        seconds[t] = time.perf_counter() - t0
        flat_parent = st.parent_rows.reshape(-1)
        # Reorder without boolean indexing: no device sync on the GPU.
        new_hist = xp.empty((B * k, t + 1), xp.int32)
        new_hist[:, :t] = xp.where(flat_parent[:, None] >= 0, history[xp.maximum(flat_parent, 0)], -1)
        new_hist[:, t] = st.tokens.reshape(-1)
        history = new_hist
        node_ids, scores = st.nodes.reshape(-1), st.scores.reshape(-1)
        prev, parents = st.tokens.reshape(-1), flat_parent
        candidates[t] = st.num_candidates
        beams[t] = (st.nodes >= 0).sum(axis=1)
    M = sizes[-1]
    leaves = node_ids.reshape(B, M)
    ads = matcher.postfilter(leaves, q) if postfilter else None
    return Result(history.reshape(B, M, L), scores.reshape(B, M), leaves, ads, candidates, beams, seconds,
                  matcher.version)
