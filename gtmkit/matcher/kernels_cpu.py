"""numba kernels of the CPU matcher: fused CD+GTM step with lazy top-k, token mask, post-filter.

`t` is a TrieArrays and `q` a RequestBatch (gtmkit/matcher/arrays.py)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .._bits import sorted_contains as _contains

N_BUCKETS = 2048


@njit(cache=True, inline="always")
def depth_of(t, node):
    lo = t.level_offsets
    a, b = 0, lo.shape[0] - 1
    while b - a > 1:  # largest d with lo[d] <= node
        m = (a + b) >> 1
        if lo[m] <= node:
            a = m
        else:
            b = m
    return a


@njit(cache=True, inline="always")
def part_range(t, node, depth):
    if t.jagged:
        return t.part_offsets[node], t.part_offsets[node + 1]
    w = t.level_width[depth]
    s = t.level_base[depth] + (node - t.level_offsets[depth]) * w
    return s, s + w


@njit(cache=True)
def node_passes(t, q, b, node, depth):
    """GTM (DESIGN §2) of one node for request b: any partition passes every attribute."""
    s0, s1 = part_range(t, node, depth)
    A = q.bitmask.shape[1]
    W = t.bitmask_table.shape[1]
    nb = t.part_bloom.shape[1]
    Wb = t.bloom_table.shape[1]
    for p in range(s0, s1):
        bid = t.part_bitmask[p]
        if bid < 0:
            break  # fixed layouts pad at the end
        ok = True
        for a in range(A):
            hit = False
            for w in range(W):
                if t.bitmask_table[bid, w] & q.bitmask[b, a, w]:
                    hit = True
                    break
            if not hit:
                ok = False
                break
        if not ok:
            continue
        for k in range(nb):
            row = t.bloom_base[k] + t.part_bloom[p, k]
            found = False
            for s in range(q.sig_off[b, k], q.sig_off[b, k + 1]):
                inside = True
                for w in range(Wb):
                    if (t.bloom_table[row, w] & q.sigs[s, w]) != q.sigs[s, w]:
                        inside = False
                        break
                if inside:
                    found = True
                    break
            if not found:
                ok = False
                break
        if ok:
            return True
    return False


@njit(cache=True, inline="always")
def _clean(x):
    # NaN sorts as -inf: a broken logit never outranks a real one, and the order stays total.
    return -np.inf if x != x else x


@njit(cache=True)
def _select_request(t, q, b, r0, r1, node_ids, logprobs, beam_scores, k, gtm, count_all,
                    out_parent, out_token, out_node, out_score, out_count):
    n_internal = t.node_offsets.shape[0] - 1
    C = 0
    for r in range(r0, r1):
        n = node_ids[r]
        if 0 <= n < n_internal:
            C += t.node_offsets[n + 1] - t.node_offsets[n]
    score = np.empty(C, np.float32)
    row = np.empty(C, np.int32)
    entry = np.empty(C, np.int64)
    cdepth = np.empty(C, np.int64)
    c = 0
    mn, mx = np.inf, -np.inf
    for r in range(r0, r1):
        n = node_ids[r]
        if not 0 <= n < n_internal:
            continue
        d = depth_of(t, n) + 1
        for j in range(t.node_offsets[n], t.node_offsets[n + 1]):
            s = _clean(np.float32(beam_scores[r] + logprobs[r, t.child_tokens[j]]))
            score[c], row[c], entry[c], cdepth[c] = s, r, j, d
            if s > -np.inf:
                mn = min(mn, s)
                mx = max(mx, s)
            c += 1
    # Bucket candidates by score (monotone: a lower bucket holds strictly lower scores), then visit
    # buckets from the top, testing GTM only until k candidates pass: the same answer as
    # filter-then-top-k, but GTM runs on about k / pass-rate candidates instead of all C.
    NB = N_BUCKETS
    scale = (NB - 1) / (mx - mn) if mx > mn else 0.0
    bucket = np.empty(C, np.int32)
    hist = np.zeros(NB + 1, np.int64)
    for i in range(C):
        s = score[i]
        bk = 0 if s == -np.inf else int((np.float64(s) - mn) * scale)
        bk = NB - 1 - bk  # bucket 0 = best
        bucket[i] = bk
        hist[bk + 1] += 1
    for i in range(NB):
        hist[i + 1] += hist[i]
    perm = np.empty(C, np.int64)
    pos = hist[:NB].copy()
    for i in range(C):  # stable: candidate order (row asc, token asc) kept inside a bucket
        perm[pos[bucket[i]]] = i
        pos[bucket[i]] += 1
    sel = np.empty(C, np.int64)
    ns = 0
    done = C
    for bk in range(NB):
        if ns >= k:
            done = hist[bk]
            break
        for x in range(hist[bk], hist[bk + 1]):
            i = perm[x]
            if not gtm or node_passes(t, q, b, entry[i] + 1, cdepth[i]):
                sel[ns] = i
                ns += 1
    total = ns
    if count_all:
        for x in range(done, C):
            i = perm[x]
            if not gtm or node_passes(t, q, b, entry[i] + 1, cdepth[i]):
                total += 1
        out_count[b] = total
    else:
        out_count[b] = -1 if gtm else C
    sel = np.sort(sel[:ns])  # candidate order = (row asc, token asc)
    keys = np.empty(ns, np.float32)
    for x in range(ns):
        keys[x] = -score[sel[x]]
    order = np.argsort(keys, kind="mergesort")  # stable: ties keep (row, token) order
    m = min(k, ns)
    for x in range(m):
        i = sel[order[x]]
        out_parent[b, x] = row[i]
        out_token[b, x] = t.child_tokens[entry[i]]
        out_node[b, x] = entry[i] + 1
        out_score[b, x] = score[i]


@njit(parallel=True, cache=True)
def step_kernel(t, q, req_rows, node_ids, logprobs, beam_scores, k, gtm, count_all,
                out_parent, out_token, out_node, out_score, out_count):
    """for each request b (rows req_rows[b]:req_rows[b+1]):
         cands = [(beam_scores[r] + logprobs[r, tok], r, tok, child) for live r, (tok, child) in children(r)
                  if not gtm or passes(child, b)]
         out[b] = the k best by (score desc, r asc, tok asc); -1 / -inf padded."""
    for b in prange(req_rows.shape[0] - 1):
        _select_request(t, q, b, req_rows[b], req_rows[b + 1], node_ids, logprobs, beam_scores, k, gtm,
                        count_all, out_parent, out_token, out_node, out_score, out_count)


@njit(parallel=True, cache=True)
def mask_kernel(t, q, node_ids, row_request, gtm, out):
    """out[r, v // 32] bit v % 32 set iff token v leads from node_ids[r] to a child (that passes GTM)."""
    n_internal = t.node_offsets.shape[0] - 1
    for r in prange(node_ids.shape[0]):
        n = node_ids[r]
        if not 0 <= n < n_internal:
            continue
        d = depth_of(t, n) + 1
        for j in range(t.node_offsets[n], t.node_offsets[n + 1]):
            if not gtm or node_passes(t, q, row_request[r], j + 1, d):
                v = t.child_tokens[j]
                out[r, v >> 5] |= np.uint32(1) << np.uint32(v & 31)


@njit(cache=True)
def ad_eligible(t, q, b, r):
    """Exact eligibility (DESIGN §2) of ad row r for request b."""
    bid = t.ad_bitmask[r]
    for a in range(q.bitmask.shape[1]):
        hit = False
        for w in range(t.bitmask_table.shape[1]):
            if t.bitmask_table[bid, w] & q.bitmask[b, a, w]:
                hit = True
                break
        if not hit:
            return False
    for k in range(q.code_off.shape[1] - 1):
        a0, a1 = t.allow_off[k, r], t.allow_off[k, r + 1]
        ok = a0 == a1
        for x in range(q.code_off[b, k], q.code_off[b, k + 1]):
            c = q.codes[x]
            if c >= 0 and not ok and _contains(t.allow_codes[k], a0, a1, c):
                ok = True
        if not ok:
            return False
        e0, e1 = t.excl_off[k, r], t.excl_off[k, r + 1]
        for x in range(q.code_off[b, k], q.code_off[b, k + 1]):
            c = q.codes[x]
            if c >= 0 and _contains(t.excl_codes[k], e0, e1, c):
                return False
    return True


@njit(parallel=True, cache=True)
def postfilter_count(t, q, leaves, first_leaf, exact, counts):
    for b in prange(leaves.shape[0]):
        c = 0
        for m in range(leaves.shape[1]):
            n = leaves[b, m]
            if n < first_leaf:
                continue
            s = n - first_leaf
            for r in range(t.sid_ad_offsets[s], t.sid_ad_offsets[s + 1]):
                if not exact or ad_eligible(t, q, b, r):
                    c += 1
        counts[b] = c


@njit(parallel=True, cache=True)
def postfilter_fill(t, q, leaves, first_leaf, exact, offsets, out_ads, out_rank):
    """Ads of the SIDs leaves[b, :] in rank order (ascending ad id within a SID), exact-filtered."""
    for b in prange(leaves.shape[0]):
        c = offsets[b]
        for m in range(leaves.shape[1]):
            n = leaves[b, m]
            if n < first_leaf:
                continue
            s = n - first_leaf
            for r in range(t.sid_ad_offsets[s], t.sid_ad_offsets[s + 1]):
                if not exact or ad_eligible(t, q, b, r):
                    out_ads[c] = t.sid_ad_ids[r]
                    out_rank[c] = m
                    c += 1
