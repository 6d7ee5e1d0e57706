"""numba kernels of the CPU matcher: the fused CD+GTM step, token mask, post-filter.

The GTM tests live in cpu/gtm.py and the per-request top-k in cpu/select.py.
`t` is a TrieArrays and `q` a RequestBatch (gtmkit/matcher/arrays.py)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ...threads import parallel_njit
from ...targeting.exact import row_eligible as _eligible
from .gtm import _gtm, depth_of, node_passes  # noqa: F401  (depth_of, node_passes: public here)
from .select import _select_request


@njit(cache=True, nogil=True)
def request_starts(row_request, starts):
    """starts[b] = first row of request b (starts[-1] = rows); False unless row_request is
    non-decreasing within [0, len(starts) - 1)."""
    B = starts.shape[0] - 1
    R = row_request.shape[0]
    prev = 0
    for r in range(R):
        v = row_request[r]
        if v < prev or v >= B:
            return False
        prev = v
    b = 0
    for r in range(R):
        while b <= row_request[r]:
            starts[b] = r
            b += 1
    while b <= B:
        starts[b] = R
        b += 1
    return True


@parallel_njit(cache=True)
def step_kernel(t, q, req_rows, node_ids, logprobs, beam_scores, k, gtm, count_all,
                out_parent, out_token, out_node, out_score, out_count, rate_hint, band_from):
    """for each request b (rows req_rows[b]:req_rows[b+1]):
         cands = [(beam_scores[r] + logprobs[r, tok], r, tok, child) for live r, (tok, child) in children(r)
                  if not gtm or passes(child, b)]
         out[b] = the k best by (score desc, r asc, tok asc); -1 / -inf padded."""
    for b in prange(req_rows.shape[0] - 1):
        # b as int64 on purpose: the parfor pass types the loop index differently from the first typing
        # pass (unsigned), so an uncast b compiled the whole selection twice
        bb = np.int64(b)
        _select_request(t, q, bb, req_rows[bb], req_rows[bb + 1], node_ids, logprobs, beam_scores, k, gtm,
                        count_all, out_parent, out_token, out_node, out_score, out_count, rate_hint, band_from)


@parallel_njit(cache=True)
def mask_kernel(t, q, node_ids, row_request, gtm, out):
    """out[r, v // 32] bit v % 32 set iff token v leads from node_ids[r] to a child with an active ad (that
    passes GTM)."""
    no, ct = t.node_offsets, t.child_tokens
    jag, lvl_off, lvl_base, lvl_width, part_off = t.jagged, t.level_offsets, t.level_base, t.level_width, t.part_offsets
    pbm, pbl, bmt, blt, blb = t.part_bitmask, t.part_bloom, t.bitmask_table, t.bloom_table, t.bloom_base
    qbm, soff, sigs = q.bitmask, q.sig_off, q.sigs
    live, nl = t.live[0] != 0, t.node_live
    n_internal = no.shape[0] - 1
    for r in prange(node_ids.shape[0]):
        n = node_ids[r]
        if not 0 <= n < n_internal:
            continue
        ck, cv = np.full(1, -1, np.int64), np.zeros(1, np.bool_)
        for j in range(no[n], no[n + 1]):
            if live and nl[j + 1] <= 0:
                continue  # no active ad below: absent for CD
            if not gtm or _gtm(jag, lvl_off, lvl_base, lvl_width, part_off, pbm, pbl, bmt, blt, blb, qbm, soff,
                               sigs, row_request[r], j + 1, ck, cv):
                v = ct[j]
                out[r, v >> 5] |= np.uint32(1) << np.uint32(v & 31)


@njit(cache=True, nogil=True)
def ad_eligible(t, q, b, r):
    """Exact eligibility of ad row r for request b (convenience form; loops call _eligible)."""
    return _eligible(t.ad_bitmask, t.bitmask_table, t.allow_off, t.allow_codes, t.excl_off, t.excl_codes,
                     q.bitmask, q.code_off, q.codes, b, r)


@njit(cache=True, nogil=True)
def _postfilter_request(t, q, b, leaves, first_leaf, exact, start, out_ads, out_rank):
    """Eligible active ads of request b's SIDs in rank order (ascending ad id within a SID), written from
    out_ads[start] on (room for every ad of the SIDs). Returns the count."""
    sao, sai = t.sid_ad_offsets, t.sid_ad_ids
    adb, bmt, ao, ac, eo, ec = t.ad_bitmask, t.bitmask_table, t.allow_off, t.allow_codes, t.excl_off, t.excl_codes
    qbm, coff, codes = q.bitmask, q.code_off, q.codes
    live, active = t.live[0] != 0, t.ad_active
    c = 0
    for m in range(leaves.shape[1]):
        s = leaves[b, m] - first_leaf
        if not 0 <= s < sao.shape[0] - 1:  # -1 padding, and any id that is not a leaf, names no SID
            continue
        for r in range(sao[s], sao[s + 1]):
            if live and active[r] == 0:
                continue  # paused
            if not exact or _eligible(adb, bmt, ao, ac, eo, ec, qbm, coff, codes, b, r):
                out_ads[start + c] = sai[r]
                out_rank[start + c] = m
                c += 1
    return c


@parallel_njit(cache=True)
def postfilter_kernel(t, q, leaves, first_leaf, exact, offsets, out_ads, out_rank, counts):
    """Per request b, the ads of the SIDs leaves[b, :] in rank order (ascending ad id within a SID),
    exact-filtered, written from out_ads[offsets[b]] on (offsets leave room for every ad of the SIDs):
    counts[b] = how many. One pass reads each ad's pause flag once, so a pause made meanwhile is seen whole or
    not at all."""
    for b in prange(leaves.shape[0]):
        bb = np.int64(b)  # one signature for the callee (see step_kernel)
        counts[bb] = _postfilter_request(t, q, bb, leaves, first_leaf, exact, offsets[bb], out_ads, out_rank)
