"""numba kernels of the CPU matcher: fused CD+GTM step with lazy top-k, token mask, post-filter.

`t` is a TrieArrays and `q` a RequestBatch (gtmkit/matcher/arrays.py)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .._bits import sorted_contains as _contains

N_BUCKETS = 2048
SIGN = np.uint64(0x80000000)
SIGN_MASK = np.uint64(0xFFFFFFFF)  # flips all 32 bits of a negative float's pattern
SHIFT32 = np.uint64(32)
LOW32 = np.uint64(0xFFFFFFFF)


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
def partition_passes(t, q, b, p):
    """GTM of one matcher partition (slot p) for request b: every bitmask attribute meets the
    request, and for every Bloom attribute some request signature lies inside the row."""
    bid = t.part_bitmask[p]
    W = t.bitmask_table.shape[1]
    for a in range(q.bitmask.shape[1]):
        hit = False
        for w in range(W):
            if t.bitmask_table[bid, w] & q.bitmask[b, a, w]:
                hit = True
                break
        if not hit:
            return False
    Wb = t.bloom_table.shape[1]
    for k in range(t.part_bloom.shape[1]):
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
            return False
    return True


@njit(cache=True)
def node_passes(t, q, b, node, depth):
    """GTM (DESIGN §2) of one node for request b: any partition passes."""
    s0, s1 = part_range(t, node, depth)
    for p in range(s0, s1):
        if t.part_bitmask[p] < 0:
            break  # fixed layouts pad at the end
        if partition_passes(t, q, b, p):
            return True
    return False


CACHE_SLOTS = 4096


@njit(cache=True)
def node_passes_cached(t, q, b, node, depth, cache_key, cache_val):
    """node_passes with a small direct-mapped cache of partition results keyed by the partition's
    table rows: near the root many nodes share one deduplicated row, so most tests become lookups."""
    s0, s1 = part_range(t, node, depth)
    nb = t.part_bloom.shape[1]
    for p in range(s0, s1):
        bid = t.part_bitmask[p]
        if bid < 0:
            break
        if nb == 1:
            key = (np.int64(bid) << 32) | np.int64(t.part_bloom[p, 0])
        elif nb == 0:
            key = np.int64(bid)
        else:
            key = np.int64(-2)
        if key >= 0:
            slot = (key * 0x9E3779B1 >> 7) & (CACHE_SLOTS - 1)
            if cache_key[slot] == key:
                ok = cache_val[slot]
            else:
                ok = partition_passes(t, q, b, p)
                cache_key[slot] = key
                cache_val[slot] = ok
        else:
            ok = partition_passes(t, q, b, p)
        if ok:
            return True
    return False


@njit(cache=True, inline="always")
def _clean(x):
    # NaN sorts as -inf: a broken logit never outranks a real one, and the order stays total.
    return -np.inf if x != x else x


@njit(cache=True, inline="always")
def _bucket(s, mn, scale, NB):
    """Linear score bucket, 0 = best; monotone, so a lower bucket holds strictly higher scores."""
    if s == -np.inf:
        return NB - 1
    return NB - 1 - int((np.float64(s) - mn) * scale)


@njit(cache=True, inline="always")
def _row_of(row_start, i):
    """Last row whose first candidate index is <= i (rows without candidates share the next one's)."""
    a, z = 0, row_start.shape[0] - 1
    while z - a > 1:
        m = (a + z) >> 1
        if row_start[m] <= i:
            a = m
        else:
            z = m
    return a


@njit(cache=True)
def _select_request(t, q, b, r0, r1, node_ids, logprobs, beam_scores, k, gtm, count_all,
                    out_parent, out_token, out_node, out_score, out_count):
    n_internal = t.node_offsets.shape[0] - 1
    nrows = r1 - r0
    row_start = np.empty(nrows + 1, np.int64)
    C = 0
    for x in range(nrows):
        row_start[x] = C
        n = node_ids[r0 + x]
        if 0 <= n < n_internal:
            C += t.node_offsets[n + 1] - t.node_offsets[n]
    row_start[nrows] = C
    # One pass writes only the scores (4 bytes a candidate): candidate i is identified by its index,
    # which orders candidates by (row, token); row and child are recovered for the few that matter.
    score = np.empty(C, np.float32)
    c = 0
    mn, mx = np.inf, -np.inf
    for x in range(nrows):
        r = r0 + x
        n = node_ids[r]
        if not 0 <= n < n_internal:
            continue
        bs = beam_scores[r]
        for j in range(t.node_offsets[n], t.node_offsets[n + 1]):
            v = _clean(np.float32(bs + logprobs[r, t.child_tokens[j]]))
            if v == 0:
                v = np.float32(0.0)  # -0 ties +0 in the composite sort below, as in a float compare
            score[c] = v
            if v > -np.inf:
                mn = min(mn, v)
                mx = max(mx, v)
            c += 1
    NB = N_BUCKETS
    scale = (NB - 1) / (mx - mn) if mx > mn else 0.0
    cum = np.zeros(NB, np.int64)
    for i in range(C):
        cum[_bucket(score[i], mn, scale, NB)] += 1
    for i in range(1, NB):
        cum[i] += cum[i - 1]
    # Lazy GTM in score order: each round tests only the candidates of buckets (lo, hi]; the window
    # grows by the observed pass rate until k pass. Same answer as filter-then-top-k.
    sel = np.empty(C, np.int64)
    ns = 0
    lo, target = -1, k
    cache_key = np.full(CACHE_SLOTS if gtm else 1, -1, np.int64)
    cache_val = np.zeros(CACHE_SLOTS if gtm else 1, np.bool_)
    while True:
        hi = lo + 1
        while hi < NB - 1 and cum[hi] < target:
            hi += 1
        for i in range(C):
            bk = _bucket(score[i], mn, scale, NB)
            if lo < bk <= hi:
                if gtm:
                    x = _row_of(row_start, i)
                    n = node_ids[r0 + x]
                    child = t.node_offsets[n] + (i - row_start[x]) + 1
                    if not node_passes_cached(t, q, b, child, depth_of(t, child), cache_key, cache_val):
                        continue
                sel[ns] = i
                ns += 1
        if ns >= k or hi >= NB - 1:
            break
        seen = cum[hi]
        rate = ns / seen if ns > 0 else 1.0 / 64.0
        need = int((k - ns) / rate * 1.25) + 1
        target = seen + max(need, seen)
        lo = hi
    if count_all and gtm:
        total = ns
        for i in range(C):
            if _bucket(score[i], mn, scale, NB) > hi:
                x = _row_of(row_start, i)
                n = node_ids[r0 + x]
                child = t.node_offsets[n] + (i - row_start[x]) + 1
                total += node_passes_cached(t, q, b, child, depth_of(t, child), cache_key, cache_val)
        out_count[b] = total
    else:
        out_count[b] = -1 if gtm else C
    # One sort of distinct uint64 composites (sortable score << 32 | ~index) orders the passers by
    # score desc, then candidate index asc = (row asc, token asc): cheaper than a stable argsort.
    bits = score.view(np.uint32)
    comp = np.empty(ns, np.uint64)
    for x in range(ns):
        i = sel[x]
        u = np.uint64(bits[i])
        key = (u ^ SIGN_MASK) if u & SIGN else (u | SIGN)
        comp[x] = (key << SHIFT32) | (LOW32 - np.uint64(i))
    comp.sort()
    for x in range(min(k, ns)):
        i = np.int64(LOW32 - (comp[ns - 1 - x] & LOW32))
        rx = _row_of(row_start, i)
        n = node_ids[r0 + rx]
        j = t.node_offsets[n] + (i - row_start[rx])
        out_parent[b, x] = r0 + rx
        out_token[b, x] = t.child_tokens[j]
        out_node[b, x] = j + 1
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


@njit(cache=True)
def _postfilter_request(t, q, b, leaves, first_leaf, exact, start, out_ads, out_rank, fill):
    """Eligible ads of request b's SIDs in rank order (ascending ad id within a SID); written from
    out_ads[start] on when fill, else only counted. Returns the count."""
    c = 0
    for m in range(leaves.shape[1]):
        n = leaves[b, m]
        if n < first_leaf:
            continue
        s = n - first_leaf
        for r in range(t.sid_ad_offsets[s], t.sid_ad_offsets[s + 1]):
            if not exact or ad_eligible(t, q, b, r):
                if fill:
                    out_ads[start + c] = t.sid_ad_ids[r]
                    out_rank[start + c] = m
                c += 1
    return c


@njit(parallel=True, cache=True)
def postfilter_count(t, q, leaves, first_leaf, exact, counts):
    dummy_ads, dummy_rank = np.empty(0, np.int64), np.empty(0, np.int32)
    for b in prange(leaves.shape[0]):
        counts[b] = _postfilter_request(t, q, b, leaves, first_leaf, exact, 0, dummy_ads, dummy_rank, False)


@njit(parallel=True, cache=True)
def postfilter_fill(t, q, leaves, first_leaf, exact, offsets, out_ads, out_rank):
    """Ads of the SIDs leaves[b, :] in rank order (ascending ad id within a SID), exact-filtered."""
    for b in prange(leaves.shape[0]):
        _postfilter_request(t, q, b, leaves, first_leaf, exact, offsets[b], out_ads, out_rank, True)
