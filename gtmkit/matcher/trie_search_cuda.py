"""NAR constrained beam search over a SuccinctTrie on the GPU (CuPy): every step runs on the device.

Same semantics and tie rules as gtmkit/matcher/trie_search_cpu.py (proposal rows are prepared by the
same routine). Per step one kernel expands every (query, live beam) block against the proposals
(binary search of each token among the node's child labels, LOUDS select0 for the child range);
the top-BW live candidates and the running top-BW finished keys are then picked by sorting
64-bit composites (score, then slot / key id), so ties resolve exactly as on the CPU."""

from __future__ import annotations

from pathlib import Path

import cupy as cp
import numpy as np

from ..errors import GtmkitError
from .backend_cuda import load_module
from .trie_search_cpu import _beam_width, _float, _prepare_rows, _proposals, _trie_arrays, length_factors

KERNEL_FILE = Path(__file__).with_name("kernels") / "trie_search.cu"
LOW32 = np.uint64(0xFFFFFFFF)


def _device_arrays(trie):
    """The trie's arrays on the current GPU, uploaded once per trie object."""
    dev = cp.cuda.Device().id
    cache = trie.__dict__.setdefault("_cuda_arrays", {})
    if dev not in cache:
        a = _trie_arrays(trie, "trie_beam_search")
        cache[dev] = {name: cp.asarray(np.ascontiguousarray(getattr(a, name)))
                      for name in ("louds", "louds_rank", "louds_select0", "label_low", "label_high",
                                   "terminal", "terminal_rank")}
        cache[dev]["high_bits"] = int(a.high_bits)
    return cache[dev]


def _unsortable(key):
    """uint64 keys holding sortable float32 bits -> float32 (inverse of the kernel's sortable())."""
    k = key.astype(cp.uint32)
    bits = cp.where(k & cp.uint32(0x80000000), k & cp.uint32(0x7FFFFFFF), ~k)
    return bits.view(cp.float32)


def _top(comp, bw):
    """Best bw composites per row, best first (0 = empty sorts last)."""
    return cp.sort(comp, axis=1)[:, ::-1][:, :bw]


def trie_beam_search_cuda(trie, tokens, logp, beam_width, theta_tok=-np.inf, theta_sent=-np.inf,
                          alpha=0.0) -> tuple:
    """-> (key_ids int64 [b, BW] -1 padded, scores float32 [b, BW] -inf padded) as CuPy arrays."""
    bw = _beam_width(beam_width)
    tt = np.float32(_float(theta_tok, "theta_tok"))
    ts = np.float32(_float(theta_sent, "theta_sent"))
    a = _float(alpha, "alpha")
    tok, lp = _proposals(tokens, logp, "trie_beam_search")
    b, T, K = tok.shape
    if bw * max(K, 1) >= 2**32:
        raise GtmkitError("trie_beam_search: beam_width * K must stay below 2^32 on the GPU")
    ptok, plp = np.empty((b, T, K), np.int32), np.empty((b, T, K), np.float32)
    pcnt = np.empty((b, T), np.int32)
    _prepare_rows(tok, lp, tt, np.full(b, T, np.int64), ptok, plp, pcnt)
    factors = length_factors(a, T)
    d = _device_arrays(trie)
    kern = load_module(KERNEL_FILE).get_function("expand_kernel")
    d_tok, d_lp, d_cnt = cp.asarray(ptok), cp.asarray(plp), cp.asarray(pcnt)
    live_node = cp.zeros((b, bw), cp.int64)
    live_score = cp.zeros((b, bw), cp.float32)
    live_count = cp.ones(b, cp.int64)  # step 0: the root, score 0
    fin_best = cp.zeros((b, bw), cp.uint64)
    live_buf = cp.empty((b, bw * K), cp.uint64)
    child_buf = cp.empty((b, bw * K), cp.int64)
    fin_buf = cp.empty((b, bw * K), cp.uint64)
    for t in range(T):
        live_buf.fill(0)
        fin_buf.fill(0)
        kern((b, bw), (128,), (d["louds"], d["louds_rank"], d["louds_select0"], d["label_low"], d["label_high"],
                               np.int32(d["high_bits"]), d["terminal"], d["terminal_rank"], d_tok, d_lp, d_cnt,
                               np.int32(T), np.int32(K), np.int32(t), live_node, live_score, live_count,
                               np.int32(bw), ts, np.float64(factors[t + 1]), live_buf, child_buf, fin_buf))
        top = _top(live_buf, bw)
        valid = top != 0
        slot = (LOW32 - (top & LOW32)).astype(cp.int64)
        slot = cp.where(valid, slot, 0)
        live_node = cp.ascontiguousarray(cp.where(valid, cp.take_along_axis(child_buf, slot, axis=1), -1))
        live_score = cp.ascontiguousarray(cp.where(valid, _unsortable(top >> np.uint64(32)), -np.inf)
                                          .astype(cp.float32))
        live_count = valid.sum(axis=1).astype(cp.int64)
        fin_best = cp.ascontiguousarray(_top(cp.concatenate([fin_best, fin_buf], axis=1), bw))
    found = fin_best != 0
    key_ids = cp.where(found, (LOW32 - (fin_best & LOW32)).astype(cp.int64), -1)
    scores = cp.where(found, _unsortable(fin_best >> np.uint64(32)), -np.inf).astype(cp.float32)
    return key_ids, scores
