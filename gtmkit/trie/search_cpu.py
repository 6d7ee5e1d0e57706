"""CPU constrained beam search over a SuccinctTrie (docs/design.md §6; the MARISA-Opt analogue of FlashTrie App. B.2):
numba threads across beams, a galloping two-pointer merge of token-sorted proposals with sorted child labels,
bounded heaps for the top-BW live prefixes and finished keys. NAR (`trie_beam_search`) and AR (`TrieBeamStepper`).

Semantics, at step t (new nodes at depth d = t+1): every live prefix (score s) meets every proposal
(token, lp) with lp > theta_tok; the pair is a candidate if token is a child and s + lp > theta_sent.
A candidate on a terminal node is finished with score (s + lp) * (6 / (5 + d)) ** alpha, before any beam
cut; candidates with children are ranked by s + lp (ties: node id asc, which at one depth is the lexicographic
order of the prefixes, so the rule does not depend on the order of the live list) and the best beam_width
stay live, best first. The answer is the best beam_width finished keys (ties: key id asc). Scores add in
float32; the normalised score is float32(float64(s + lp) * factor[d]), factor computed on the host.
A token repeated in one proposal list counts once, with its best log-prob. Non-finite log-probs: NaN fails
lp > theta_tok (dropped); +inf passes and ranks above every finite score, ties as above; so no sum is NaN,
and alpha is refused where a length factor is 0 or infinite. Tokens outside [0, 2^31-1] match nothing."""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numba
import numpy as np
from numba import njit, prange

from .._bits import lower_bound
from ..threads import parallel_njit
from ..errors import GtmkitError
from ..inputs.keys import MAX_TOKEN, clip_tokens
from .._args import check_memory
from .nav import child_range, has_children, is_terminal, key_id, sibling_base, sibling_label


# ---------------------------------------------------------------------------------------------------
# Bounded heaps: the root is the worst entry kept, so a new entry costs one comparison unless it beats it.


@njit(cache=True, nogil=True, inline="always")
def live_better(s1, n1, s2, n2):
    """Live candidates: score desc, then node id asc (BFS ids: the prefixes' lexicographic order at one
    depth; the GPU's NAR search then needs no ordered live list)."""
    if s1 != s2:
        return s1 > s2
    return n1 < n2


@njit(cache=True, nogil=True, inline="always")
def _live_swap(hs, hp, ht, hn, i, j):
    hs[i], hs[j] = hs[j], hs[i]
    hp[i], hp[j] = hp[j], hp[i]
    ht[i], ht[j] = ht[j], ht[i]
    hn[i], hn[j] = hn[j], hn[i]


@njit(cache=True, nogil=True)
def _live_down(hs, hp, ht, hn, n, i):
    while True:
        w = i
        a, b = 2 * i + 1, 2 * i + 2
        if a < n and live_better(hs[w], hn[w], hs[a], hn[a]):
            w = a
        if b < n and live_better(hs[w], hn[w], hs[b], hn[b]):
            w = b
        if w == i:
            return
        _live_swap(hs, hp, ht, hn, i, w)
        i = w


@njit(cache=True, nogil=True, inline="always")
def live_enters(hs, hn, n, s, node):
    """Would (s, node) be kept by a heap holding n of its hs.shape[0] entries?"""
    return n < hs.shape[0] or live_better(s, node, hs[0], hn[0])


@njit(cache=True, nogil=True)
def live_push(hs, hp, ht, hn, n, s, p, tk, node):
    """Keep (score s, parent p, token tk, node) if it is among the best cap = hs.shape[0]; -> new n."""
    if n < hs.shape[0]:
        i = n
        hs[i], hp[i], ht[i], hn[i] = s, p, tk, node
        while i > 0:
            par = (i - 1) >> 1
            if not live_better(hs[par], hn[par], hs[i], hn[i]):
                break
            _live_swap(hs, hp, ht, hn, i, par)
            i = par
        return n + 1
    if live_better(s, node, hs[0], hn[0]):
        hs[0], hp[0], ht[0], hn[0] = s, p, tk, node
        _live_down(hs, hp, ht, hn, n, 0)
    return n


@njit(cache=True, nogil=True)
def live_sort(hs, hp, ht, hn, n):
    """Heap -> best-first order in place (pop the worst to the back)."""
    for end in range(n - 1, 0, -1):
        _live_swap(hs, hp, ht, hn, 0, end)
        _live_down(hs, hp, ht, hn, end, 0)


@njit(cache=True, nogil=True, inline="always")
def fin_better(s1, k1, s2, k2):
    """Finished keys: normalised score desc, then key id asc."""
    if s1 != s2:
        return s1 > s2
    return k1 < k2


@njit(cache=True, nogil=True)
def _fin_down(hs, hk, n, i):
    while True:
        w = i
        a, b = 2 * i + 1, 2 * i + 2
        if a < n and fin_better(hs[w], hk[w], hs[a], hk[a]):
            w = a
        if b < n and fin_better(hs[w], hk[w], hs[b], hk[b]):
            w = b
        if w == i:
            return
        hs[i], hs[w] = hs[w], hs[i]
        hk[i], hk[w] = hk[w], hk[i]
        i = w


@njit(cache=True, nogil=True)
def fin_push(hs, hk, n, s, k):
    """Keep finished key k with score s if among the best hs.shape[0]; -> new n."""
    if n < hs.shape[0]:
        i = n
        hs[i], hk[i] = s, k
        while i > 0:
            par = (i - 1) >> 1
            if not fin_better(hs[par], hk[par], hs[i], hk[i]):
                break
            hs[i], hs[par] = hs[par], hs[i]
            hk[i], hk[par] = hk[par], hk[i]
            i = par
        return n + 1
    if fin_better(s, k, hs[0], hk[0]):
        hs[0], hk[0] = s, k
        _fin_down(hs, hk, n, 0)
    return n


@njit(cache=True, nogil=True)
def fin_sort(hs, hk, n):
    for end in range(n - 1, 0, -1):
        hs[0], hs[end] = hs[end], hs[0]
        hk[0], hk[end] = hk[end], hk[0]
        _fin_down(hs, hk, end, 0)


# ---------------------------------------------------------------------------------------------------
# Kernels


@parallel_njit(cache=True)
def _prepare_rows(tokens, logp, theta_tok, rows_used, out_tok, out_lp, out_cnt):
    """Proposal rows tokens int64 / logp float32 [b, R, K] -> for rows r < rows_used[q]: the proposals
    with lp > theta_tok and a token in [0, 2^31-1], sorted by token, a repeated token once with its best
    lp, in out_tok int32 / out_lp float32 [b, R, K] with out_cnt int32 [b, R] of them."""
    b, R, K = tokens.shape
    for w in prange(b * R):
        q, r = w // R, w % R
        if r >= rows_used[q]:
            out_cnt[q, r] = 0
            continue
        keys = np.empty(K, np.uint64)
        n = 0
        for k in range(K):
            tok = tokens[q, r, k]
            if logp[q, r, k] > theta_tok and 0 <= tok <= MAX_TOKEN:
                keys[n] = (np.uint64(tok) << np.uint64(32)) | np.uint64(k)
                n += 1
        srt = np.sort(keys[:n])
        m = 0
        for i in range(n):
            tok = np.int32(srt[i] >> np.uint64(32))
            lp = logp[q, r, np.int64(srt[i] & np.uint64(0xFFFFFFFF))]
            if m > 0 and out_tok[q, r, m - 1] == tok:
                if lp > out_lp[q, r, m - 1]:
                    out_lp[q, r, m - 1] = lp
            else:
                out_tok[q, r, m] = tok
                out_lp[q, r, m] = lp
                m += 1
        out_cnt[q, r] = m


@njit(cache=True, nogil=True)
def _gallop_tokens(row, lo, hi, x):
    """First i in [lo, hi) with row[i] >= x (row ascending), else hi: exponential then binary search,
    so a short child list against a long proposal list costs O(deg log K), not O(K)."""
    if lo >= hi or row[lo] >= x:
        return lo
    step = 1
    while lo + step < hi and row[lo + step] < x:
        lo += step
        step <<= 1
    return lower_bound(row, lo + 1, min(lo + step, hi), x)


@njit(cache=True, nogil=True)
def _gallop_children(t, base, first, end, lo, x):
    """First node in [lo, end) whose label is >= x, else end (labels of the siblings first..end-1 ascend; base =
    sibling_base(t, first, end))."""
    hi = end
    if lo >= hi or sibling_label(t, base, first, end, lo) >= x:
        return lo
    step = 1
    while lo + step < hi and sibling_label(t, base, first, end, lo + step) < x:
        lo += step
        step <<= 1
    r = min(lo + step, hi)
    lo += 1
    while lo < r:
        mid = (lo + r) >> 1
        if sibling_label(t, base, first, end, mid) < x:
            lo = mid + 1
        else:
            r = mid
    return lo


@njit(cache=True, nogil=True)
def _expand_chunk(t, ptok, plp, pcnt, row, q, c, n_chunks, live_node, live_score, n_live, theta_sent,
                  factor, last, hs, hp, ht, hn, fs, fk):
    """Beams c, c + n_chunks, ... of query q against their proposal rows (row >= 0: shared NAR row, else
    the beam's own); candidates go to this chunk's live heap (hs, hp, ht, hn) and finished heap (fs, fk).
    -> (live entries, finished entries)."""
    nl = 0
    nf = 0
    for i in range(c, n_live[q], n_chunks):
        r = row if row >= 0 else i
        cnt = pcnt[q, r]
        first, end = child_range(t, live_node[q, i])
        if cnt == 0 or first == end:
            continue
        toks = ptok[q, r]
        s = live_score[q, i]
        k = 0
        node = first
        base = sibling_base(t, first, end)
        lab = sibling_label(t, base, first, end, node)
        while True:
            tok = toks[k]
            if tok < lab:
                k = _gallop_tokens(toks, k + 1, cnt, lab)
                if k >= cnt:
                    break
            elif tok > lab:
                node = _gallop_children(t, base, first, end, node + 1, tok)
                if node >= end:
                    break
                lab = sibling_label(t, base, first, end, node)
            else:
                ns = s + plp[q, r, k]
                if ns > theta_sent:
                    term = is_terminal(t, node)
                    if term:
                        nf = fin_push(fs, fk, nf, np.float32(np.float64(ns) * factor), key_id(t, node))
                    # a non-terminal node always has children; a terminal one is checked (one select)
                    # only when it would make the cut
                    if not last and live_enters(hs, hn, nl, ns, node):
                        if not term or has_children(t, node):
                            nl = live_push(hs, hp, ht, hn, nl, ns, i, tok, node)
                k += 1
                node += 1
                if k >= cnt or node >= end:
                    break
                lab = sibling_label(t, base, first, end, node)
    return nl, nf


@njit(cache=True, nogil=True)
def _merge_query(q, hs, hp, ht, hn, h_cnt, fs, fk, f_cnt, live_node, live_score, live_parent, live_tok,
                 n_live, gs, gk, g_cnt):
    """Fold the chunk heaps of query q into its new live list (best first) and its finished heap."""
    n = h_cnt[q, 0]
    a_s, a_p, a_t, a_n = hs[q, 0], hp[q, 0], ht[q, 0], hn[q, 0]
    for c in range(1, h_cnt.shape[1]):
        for e in range(h_cnt[q, c]):
            n = live_push(a_s, a_p, a_t, a_n, n, hs[q, c, e], hp[q, c, e], ht[q, c, e], hn[q, c, e])
    live_sort(a_s, a_p, a_t, a_n, n)
    for i in range(n):
        live_node[q, i], live_score[q, i] = a_n[i], a_s[i]
        live_parent[q, i], live_tok[q, i] = a_p[i], a_t[i]
    for i in range(n, live_node.shape[1]):
        live_node[q, i], live_score[q, i], live_parent[q, i], live_tok[q, i] = -1, -np.inf, -1, -1
    n_live[q] = n
    g = g_cnt[q]
    for c in range(f_cnt.shape[1]):
        for e in range(f_cnt[q, c]):
            g = fin_push(gs[q], gk[q], g, fs[q, c, e], fk[q, c, e])
    g_cnt[q] = g


@parallel_njit(cache=True)
def _run_steps(t, ptok, plp, pcnt, nar, step0, step1, last_step, theta_sent, factors, live_node, live_score,
               live_parent, live_tok, n_live, hs, hp, ht, hn, h_cnt, fs, fk, f_cnt, gs, gk, g_cnt):
    """Steps step0 .. step1-1 for every query: threads over (query, beam chunk) pairs, then over queries
    to fold the chunks' heaps. NAR (nar=True) reads proposal row `step` for every beam, AR row = beam."""
    b = live_node.shape[0]
    n_chunks = h_cnt.shape[1]
    for step in range(step0, step1):
        factor = factors[step + 1]
        last = step == last_step
        row = step if nar else -1
        for w in prange(b * n_chunks):
            q, c = w // n_chunks, w % n_chunks
            nl, nf = _expand_chunk(t, ptok, plp, pcnt, row, q, c, n_chunks, live_node, live_score, n_live,
                                   theta_sent, factor, last, hs[q, c], hp[q, c], ht[q, c], hn[q, c],
                                   fs[q, c], fk[q, c])
            h_cnt[q, c] = nl
            f_cnt[q, c] = nf
        for q in prange(b):
            # q as int64: the parfor pass types the index unsigned, and an uncast q compiled the callee twice
            _merge_query(np.int64(q), hs, hp, ht, hn, h_cnt, fs, fk, f_cnt, live_node, live_score, live_parent,
                         live_tok, n_live, gs, gk, g_cnt)


@njit(cache=True, nogil=True)
def _finished(gs, gk, g_cnt):
    """Best-first copies of the finished heaps -> (key ids int64 [b, BW] -1 padded, scores float32 -inf)."""
    b, bw = gs.shape
    ids = np.full((b, bw), -1, np.int64)
    scores = np.full((b, bw), -np.inf, np.float32)
    for q in range(b):
        n = g_cnt[q]
        s, k = gs[q, :n].copy(), gk[q, :n].copy()
        fin_sort(s, k, n)
        ids[q, :n] = k
        scores[q, :n] = s
    return ids, scores


# ---------------------------------------------------------------------------------------------------
# Python API


class LiveBeams(NamedTuple):
    """The live prefixes after a step, best first per query (entries past count[q] are padding).

    nodes    int64 [b, BW]    trie node of the prefix (-1 padding; ids reach 2^32-2)
    scores   float32 [b, BW]  summed log-prob (-inf padding)
    parents  int32 [b, BW]    index of the beam it extends in the previous live list (-1 padding)
    tokens   int32 [b, BW]    the token it appended (-1 padding)
    count    int32 [b]        live beams per query
    """

    nodes: np.ndarray
    scores: np.ndarray
    parents: np.ndarray
    tokens: np.ndarray
    count: np.ndarray


@functools.lru_cache(maxsize=64)
def length_factors(alpha: float, steps: int) -> np.ndarray:
    """float64 [steps+1]: factor[d] = (6 / (5 + d)) ** alpha, the length normalisation (FlashTrie Eq. 2).
    Cached (read-only): a GPU query is short enough for computing them each call to show. An alpha whose
    factor is 0 or infinite at some depth is refused: +inf * 0 would be a NaN score."""
    try:
        f = np.array([(6.0 / (5 + d)) ** alpha for d in range(steps + 1)], np.float64)
    except OverflowError:
        f = np.full(1, np.inf)
    if not (np.isfinite(f).all() and (f > 0).all()):
        raise GtmkitError(f"alpha = {alpha!r}: the length factor (6 / (5 + d)) ** alpha is 0 or infinite "
                          f"within {steps} steps")
    f.flags.writeable = False
    return f


def _float(x, what: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise GtmkitError(f"trie_beam_search: {what} must be a number, got {x!r}") from None
    if math.isnan(v):
        raise GtmkitError(f"trie_beam_search: {what} is NaN")
    return v


def _proposals(tokens, logp, what: str) -> tuple:
    """-> (tokens int64 [b, R, K] clipped to [-1, 2^31] so out-of-range ids match nothing, logp float32)."""
    tokens, logp = np.asarray(tokens), np.asarray(logp)
    if tokens.ndim != 3 or tokens.shape != logp.shape:
        raise GtmkitError(f"{what}: tokens and logp must both be [b, {'T' if 'search' in what else 'BW'}, K] "
                          f"arrays, got shapes {list(tokens.shape)} and {list(logp.shape)}")
    if tokens.dtype.kind not in "iu":
        raise GtmkitError(f"{what}: tokens must be integers, got dtype {tokens.dtype}")
    if logp.dtype.kind != "f":
        raise GtmkitError(f"{what}: logp must be floats, got dtype {logp.dtype}")
    if tokens.shape[2] >= 2**32:
        raise GtmkitError(f"{what}: K = {tokens.shape[2]} proposals per row is too many")
    return np.ascontiguousarray(clip_tokens(tokens)), np.ascontiguousarray(logp, np.float32)


def _trie_arrays(trie, what: str):
    arrays = getattr(trie, "arrays", None)
    if arrays is None or not hasattr(arrays, "louds"):
        raise GtmkitError(f"{what}: trie must be a SuccinctTrie, got {type(trie).__name__}")
    return arrays


def _beam_width(beam_width) -> int:
    if isinstance(beam_width, bool) or not isinstance(beam_width, (int, np.integer)) or beam_width < 1:
        raise GtmkitError(f"trie_beam_search: beam_width must be a positive integer, got {beam_width!r}")
    return int(beam_width)


class _State:
    """Per-batch buffers, allocated once: live lists, per-chunk heaps, finished heaps."""

    def __init__(self, b: int, bw: int):
        # Chunks per query: enough (query, chunk) work items to keep every thread busy, a few more for
        # balance, since a beam's work varies with its degree.
        self.chunks = max(1, min(bw, -(-2 * numba.get_num_threads() // b)))
        c = self.chunks
        check_memory(b * bw * (20 + 12 + 32 * c), f"trie search of {b} queries with beam_width={bw}")
        self.live = LiveBeams(np.full((b, bw), -1, np.int64), np.full((b, bw), -np.inf, np.float32),
                              np.full((b, bw), -1, np.int32), np.full((b, bw), -1, np.int32),
                              np.zeros(b, np.int32))
        self.live.nodes[:, 0] = 0
        self.live.scores[:, 0] = 0.0
        self.live.count[:] = 1
        self.heap = (np.empty((b, c, bw), np.float32), np.empty((b, c, bw), np.int32),
                     np.empty((b, c, bw), np.int32), np.empty((b, c, bw), np.int64), np.zeros((b, c), np.int64))
        self.fin_chunk = (np.empty((b, c, bw), np.float32), np.empty((b, c, bw), np.int64),
                          np.zeros((b, c), np.int64))
        self.fin = (np.empty((b, bw), np.float32), np.empty((b, bw), np.int64), np.zeros(b, np.int64))

    def run(self, arrays, ptok, plp, pcnt, nar, step0, step1, last_step, theta_sent, factors):
        _run_steps(arrays, ptok, plp, pcnt, nar, step0, step1, last_step, theta_sent, factors,
                   self.live.nodes, self.live.scores, self.live.parents, self.live.tokens, self.live.count,
                   *self.heap, *self.fin_chunk, *self.fin)

    def result(self) -> tuple:
        return _finished(*self.fin)


def trie_beam_search_cpu(trie, tokens, logp, beam_width: int, theta_tok: float = -math.inf,
                         theta_sent: float = -math.inf, alpha: float = 0.0) -> tuple:
    """trie_beam_search (search.py) on the CPU."""
    arrays = _trie_arrays(trie, "trie_beam_search")
    bw = _beam_width(beam_width)
    tt = np.float32(_float(theta_tok, "theta_tok"))
    ts = np.float32(_float(theta_sent, "theta_sent"))
    a = _float(alpha, "alpha")
    tok, lp = _proposals(tokens, logp, "trie_beam_search")
    b, steps, k = tok.shape
    if b == 0:
        raise GtmkitError("trie_beam_search: tokens and logp hold no queries (b = 0)")
    ptok, plp = np.empty((b, steps, k), np.int32), np.empty((b, steps, k), np.float32)
    pcnt = np.empty((b, steps), np.int32)
    _prepare_rows(tok, lp, tt, np.full(b, steps, np.int64), ptok, plp, pcnt)
    state = _State(b, bw)
    if steps:
        state.run(arrays, ptok, plp, pcnt, True, 0, steps, steps - 1, ts, length_factors(a, steps))
    return state.result()


def stepper_settings(obj, batch, beam_width, theta_tok, theta_sent, alpha, max_steps) -> None:
    """Checked settings of an AR stepper (CPU or GPU), set on obj; its step count starts at 0."""
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise GtmkitError(f"TrieBeamStepper: batch must be a positive integer, got {batch!r}")
    obj.batch, obj.beam_width = int(batch), _beam_width(beam_width)
    obj.theta_tok = np.float32(_float(theta_tok, "theta_tok"))
    obj.theta_sent = np.float32(_float(theta_sent, "theta_sent"))
    obj.alpha = _float(alpha, "alpha")
    if max_steps is not None and (isinstance(max_steps, (bool, np.bool_)) or not isinstance(max_steps, (int, np.integer))
                                  or max_steps < 1):
        raise GtmkitError(f"TrieBeamStepper: max_steps must be a positive integer or None, got {max_steps!r}")
    obj.max_steps = None if max_steps is None else int(max_steps)
    length_factors(obj.alpha, obj.max_steps or 1)  # an alpha that breaks the normalisation fails here
    obj.steps = 0


class TrieBeamStepper:
    """The AR search on the CPU, NumPy arrays (search.trie_beam_stepper says how to drive it)."""

    def __init__(self, trie, batch: int, beam_width: int, theta_tok: float = -math.inf,
                 theta_sent: float = -math.inf, alpha: float = 0.0, max_steps: int = None):
        self._arrays = _trie_arrays(trie, "TrieBeamStepper")
        stepper_settings(self, batch, beam_width, theta_tok, theta_sent, alpha, max_steps)
        self._state = _State(self.batch, self.beam_width)

    @property
    def live(self) -> LiveBeams:
        """The current live beams (arrays owned by the stepper: copy what you keep across steps)."""
        return self._state.live

    @property
    def done(self) -> bool:
        """No query has a live beam left (or max_steps were taken)."""
        return bool(self._state.live.count.max() == 0) or self.steps == self.max_steps

    def step(self, tokens, logp) -> LiveBeams:
        """Advance every query by one token. tokens int [b, R, K], logp float [b, R, K]: row i holds the
        proposals of live beam i; R >= the largest live count. -> the new live beams."""
        if self.max_steps is not None and self.steps >= self.max_steps:
            raise GtmkitError(f"TrieBeamStepper: all {self.max_steps} steps taken")
        tok, lp = _proposals(tokens, logp, "TrieBeamStepper.step")
        b, r, k = tok.shape
        count = self._state.live.count
        if b != self.batch or r < int(count.max()) or r > self.beam_width:
            raise GtmkitError(f"TrieBeamStepper.step: proposals are [{b}, {r}, K], need [{self.batch}, R, K] "
                              f"with {int(count.max())} <= R <= {self.beam_width}")
        ptok, plp = np.empty((b, r, k), np.int32), np.empty((b, r, k), np.float32)
        pcnt = np.empty((b, r), np.int32)
        _prepare_rows(tok, lp, self.theta_tok, count.astype(np.int64), ptok, plp, pcnt)
        last = self.max_steps - 1 if self.max_steps is not None else -1
        factors = length_factors(self.alpha, self.steps + 1)
        self._state.run(self._arrays, ptok, plp, pcnt, False, self.steps, self.steps + 1, last,
                        self.theta_sent, factors)
        self.steps += 1
        return self._state.live

    def result(self) -> tuple:
        """(key_ids int64 [b, BW] -1 padded, scores float32 [b, BW] -inf padded), best first, so far."""
        return self._state.result()
