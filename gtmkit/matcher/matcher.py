"""`Matcher`: the online CD+GTM operations on a loaded index, dispatched to a backend.

backend "cpu" = numba (this module's kernels_cpu); "cuda" = CuPy RawKernels (imported only when chosen)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import GtmkitError
from . import kernels_cpu as K
from .arrays import RequestBatch, stack_requests, trie_arrays


class Step(NamedTuple):
    """Per-request top-k of one CD+GTM step. Arrays [num_requests, k]:
    parent_rows int32 (row of the input the candidate extends), tokens int32, nodes int32 (child node),
    all -1 where fewer than k candidates exist; scores float32 (beam_score + logprob), -inf there.
    num_candidates int64 [num_requests]: candidates that passed CD (and GTM when on) before the
    top-k; -1 when GTM was on and counting was not asked for (GTM runs lazily)."""

    parent_rows: np.ndarray
    tokens: np.ndarray
    nodes: np.ndarray
    scores: np.ndarray
    num_candidates: np.ndarray


def cuda_available() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, no device: all mean "no GPU"
        return False


class Matcher:
    """CD+GTM matcher over an Index.

    device: "cpu" (numba), "cuda" (CuPy; needs a GPU) or "auto" (cuda when CuPy sees a GPU)."""

    def __init__(self, index, device: str = "cpu"):
        if device == "auto":
            device = "cuda" if cuda_available() else "cpu"
        if device not in ("cpu", "cuda"):
            raise GtmkitError(f"device must be 'cpu', 'cuda' or 'auto', got {device!r}")
        if device == "cuda":
            raise GtmkitError("device 'cuda': the GPU matcher is not available in this version")
        self.index = index
        self.device = device
        self.arrays = trie_arrays(index)
        self.vocab_size = index.vocab_size
        self.first_leaf = index.first_leaf
        self._bloom_words = int(self.arrays.bloom_table.shape[1])

    # --- inputs -----------------------------------------------------------------------------
    def batch(self, requests) -> RequestBatch:
        """Stack encoded requests once (beam_search does this; pass the batch to every step)."""
        ix = self.index
        return stack_requests(requests, len(ix.layout.names), ix.layout.words, len(ix.bloom), self._bloom_words)

    def _rows(self, node_ids, row_request, n_requests):
        node_ids = np.ascontiguousarray(node_ids, np.int64).reshape(-1)
        row_request = np.ascontiguousarray(row_request, np.int64).reshape(-1)
        if row_request.shape != node_ids.shape:
            raise GtmkitError(f"row_request has {len(row_request)} rows, node_ids {len(node_ids)}")
        if len(row_request) and (np.any(np.diff(row_request) < 0) or row_request[0] < 0
                                 or row_request[-1] >= n_requests):
            raise GtmkitError("row_request must be non-decreasing request numbers in [0, num_requests)")
        starts = np.searchsorted(row_request, np.arange(n_requests + 1)).astype(np.int64)
        return node_ids, row_request, starts

    # --- operations --------------------------------------------------------------------------
    def step(self, node_ids, logprobs, beam_scores, row_request, requests, k: int, gtm: bool = True,
             count_candidates: bool = False) -> Step:
        """One fused CD+GTM step with top-k per request (DESIGN §5).

        node_ids int [R] (-1 = dead row), logprobs float [R, V], beam_scores float [R],
        row_request int [R] (non-decreasing: rows of a request are contiguous), requests: encoded
        requests or a RequestBatch. Ties: score desc, then parent row asc, then token asc."""
        q = self.batch(requests)
        B = q.size
        node_ids, _, starts = self._rows(node_ids, row_request, B)
        logprobs = np.ascontiguousarray(logprobs, np.float32)
        beam_scores = np.ascontiguousarray(beam_scores, np.float32).reshape(-1)
        R = len(node_ids)
        if logprobs.shape != (R, self.vocab_size) or beam_scores.shape != (R,):
            raise GtmkitError(f"expected logprobs [{R}, {self.vocab_size}] and beam_scores [{R}], got "
                              f"{list(logprobs.shape)} and {list(beam_scores.shape)}")
        if k < 1:
            raise GtmkitError("k must be >= 1")
        out = Step(np.full((B, k), -1, np.int32), np.full((B, k), -1, np.int32), np.full((B, k), -1, np.int32),
                   np.full((B, k), -np.inf, np.float32), np.zeros(B, np.int64))
        K.step_kernel(self.arrays, q, starts, node_ids, logprobs, beam_scores, int(k), bool(gtm),
                      bool(count_candidates), *out)
        return out

    def mask(self, node_ids, row_request, requests, gtm: bool = True) -> np.ndarray:
        """int32 [R, ceil(V/32)]: bit v % 32 of word v // 32 set iff token v is allowed for row r."""
        q = self.batch(requests)
        node_ids, row_request, _ = self._rows(node_ids, row_request, q.size)
        out = np.zeros((len(node_ids), -(-self.vocab_size // 32)), np.uint32)
        K.mask_kernel(self.arrays, q, node_ids, row_request, bool(gtm), out)
        return out.view(np.int32)

    def postfilter(self, leaf_nodes, requests, exact: bool = True) -> list:
        """Expand each request's SIDs (leaf_nodes [B, M], -1 padded) to ads and keep the exactly
        eligible ones. Returns per request (ad_ids int64, sid_rank int32): SID rank order, then ad id."""
        q = self.batch(requests)
        leaves = np.ascontiguousarray(leaf_nodes, np.int64)
        if leaves.ndim != 2 or leaves.shape[0] != q.size:
            raise GtmkitError(f"leaf_nodes must be [num_requests={q.size}, M], got {list(leaves.shape)}")
        counts = np.zeros(q.size, np.int64)
        K.postfilter_count(self.arrays, q, leaves, self.first_leaf, bool(exact), counts)
        offsets = np.zeros(q.size + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        ads = np.empty(int(offsets[-1]), np.int64)
        rank = np.empty(int(offsets[-1]), np.int32)
        K.postfilter_fill(self.arrays, q, leaves, self.first_leaf, bool(exact), offsets, ads, rank)
        return [(ads[offsets[b]:offsets[b + 1]], rank[offsets[b]:offsets[b + 1]]) for b in range(q.size)]
