"""Per-request top-k of the CPU step (numba): which candidates are scored, kept, tested for GTM and
ordered. Two selections with the same answer (filter-then-top-k, ties by score desc, row asc, token
asc): bucket windows for small requests, a one-pass band with a rising threshold for large ones.

`t` is a TrieArrays and `q` a RequestBatch (gtmkit/matcher/arrays.py)."""

from __future__ import annotations

import numpy as np
from numba import njit

from .gtm import CACHE_SLOTS, GTM_BATCH, _depth, _gtm, _gtm_batch, request_words

N_BUCKETS = 2048
SIGN = np.uint64(0x80000000)
SIGN_MASK = np.uint64(0xFFFFFFFF)  # flips all 32 bits of a negative float's pattern
SHIFT32 = np.uint64(32)
LOW32 = np.uint64(0xFFFFFFFF)


@njit(cache=True, nogil=True, inline="always")
def _clean(x):
    # NaN sorts as -inf: a broken logit never outranks a real one, and the order stays total.
    return -np.inf if x != x else x


@njit(cache=True, nogil=True, inline="always")
def _bucket(s, mn, scale, NB):
    """Linear score bucket, 0 = best; monotone, so a lower bucket holds strictly higher scores. s is finite
    in [mn, mx] or -inf (last), scale = (NB - 1) / (mx - mn) or 0, so the index is in [0, NB); a +inf must
    not reach here ((inf - mn) * scale is inf or NaN): the callers bucket it first."""
    if s == -np.inf:
        return NB - 1
    return NB - 1 - int((np.float64(s) - mn) * scale)


@njit(cache=True, nogil=True)
def _finite_range(score, n, mn, mx):
    """-> (mn, mx, plus): the least and greatest finite score of score[:n] ((0, 0) when none is finite),
    given the range of the scores above -inf. A +inf (rare) is written over with mx for the bucketing,
    which puts it in bucket 0 with the best finite scores; plus lists where, to write it back."""
    plus = np.zeros(0, np.int64)
    if mx == np.inf:
        mx = -np.inf
        m = 0
        for i in range(n):
            if score[i] == np.inf:
                m += 1
            elif score[i] > -np.inf:
                mx = max(mx, np.float64(score[i]))
        plus = np.empty(m, np.int64)
        m = 0
        for i in range(n):
            if score[i] == np.inf:
                plus[m] = i
                m += 1
    if not mn <= mx:  # no finite score (mn is +inf only then)
        mn, mx = 0.0, 0.0
    for i in plus:
        score[i] = mx
    return mn, mx, plus


@njit(cache=True, nogil=True, inline="always")
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


@njit(cache=True, nogil=True, inline="always")
def _row_after(row_start, x, i):
    """_row_of(row_start, i) for candidate indices that only ascend: the cursor x moves forward from the last row."""
    while x + 1 < row_start.shape[0] - 1 and row_start[x + 1] <= i:
        x += 1
    return x


@njit(cache=True, nogil=True, inline="always")
def _composite(v, i):
    """Distinct uint64 whose descending order is (score desc, candidate index asc)."""
    u = np.uint64(np.float32(v).view(np.uint32))
    key = (u ^ SIGN_MASK) if u & SIGN else (u | SIGN)
    return (key << SHIFT32) | (LOW32 - np.uint64(i))


@njit(cache=True, nogil=True, inline="always")
def _score_of(comp):
    u = np.uint32(comp >> SHIFT32)
    bits = (u & np.uint32(0x7FFFFFFF)) if u & np.uint32(0x80000000) else ~u
    return np.uint32(bits).view(np.float32)


@njit(cache=True, nogil=True, inline="always")
def _insertion_desc(a, lo, hi):
    for x in range(lo + 1, hi):
        v = a[x]
        y = x - 1
        while y >= lo and a[y] < v:
            a[y + 1] = a[y]
            y -= 1
        a[y + 1] = v


@njit(cache=True, nogil=True)
def _kth_smallest(a, n, kth):
    """The kth smallest (0-based) of a[:n], the value np.partition(a[:n], kth)[kth] is; reorders a[:n].
    A quickselect of our own: numba's np.partition and np.sort bring their compile time into every
    kernel that links this module (their generic code is re-optimised in each caller)."""
    lo, hi = 0, n - 1
    while hi > lo:
        mid = (lo + hi) >> 1
        if a[mid] < a[lo]:  # median of three: sorted, reversed and uniform inputs stay O(n)
            a[mid], a[lo] = a[lo], a[mid]
        if a[hi] < a[lo]:
            a[hi], a[lo] = a[lo], a[hi]
        if a[hi] < a[mid]:
            a[hi], a[mid] = a[mid], a[hi]
        p = a[mid]
        i, j = lo, hi
        while i <= j:  # Hoare: both sides stop on values equal to p, so runs of ties split evenly
            while a[i] < p:
                i += 1
            while p < a[j]:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if kth <= j:
            hi = j
        elif kth >= i:
            lo = i
        else:  # a[j+1:i] all equal p
            return a[kth]
    return a[kth]


@njit(cache=True, nogil=True)
def _heapsort_desc(a, lo, hi):
    """Sort a[lo:hi] descending in place in O(n log n): a min-heap whose root goes to the end each round."""
    n = hi - lo
    for start in range((n >> 1) - 1, -1, -1):
        _sift_min(a, lo, start, n)
    for end in range(n - 1, 0, -1):
        a[lo], a[lo + end] = a[lo + end], a[lo]
        _sift_min(a, lo, 0, end)


@njit(cache=True, nogil=True, inline="always")
def _sift_min(a, lo, i, n):
    v = a[lo + i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and a[lo + c + 1] < a[lo + c]:
            c += 1
        if not a[lo + c] < v:
            break
        a[lo + i] = a[lo + c]
        i = c
    a[lo + i] = v


@njit(cache=True, nogil=True)
def _emit(no, ct, node_ids, r0, row_start, comp, n, b, k, out_parent, out_token, out_node, out_score):
    """Request b's outputs from its passers' composites comp[:n], best first: the k best, -1 / -inf
    padded. A candidate's row and child come back from its index through the per-row offsets."""
    for x in range(min(k, n)):
        i = np.int64(LOW32 - (comp[x] & LOW32))
        rx = _row_of(row_start, i)
        j = no[node_ids[r0 + rx]] + (i - row_start[rx])
        out_parent[b, x] = r0 + rx
        out_token[b, x] = ct[j]
        out_node[b, x] = j + 1
        out_score[b, x] = _score_of(comp[x])
    for x in range(min(k, n), k):
        out_parent[b, x] = -1
        out_token[b, x] = -1
        out_node[b, x] = -1
        out_score[b, x] = -np.inf


@njit(cache=True, nogil=True)
def _sort_desc(buf, lo, hi):
    """Sort buf[lo:hi] descending in place: a counting sort on linear score bins, then insertion sorts
    inside the (small) bins; a crowded bin (many equal scores) gets a real sort."""
    n = hi - lo
    if n <= 32:
        _insertion_desc(buf, lo, hi)
        return
    mn, mx = np.inf, -np.inf
    for x in range(lo, hi):
        f = _score_of(buf[x])
        if -np.inf < f < np.inf:
            mn = min(mn, f)
            mx = max(mx, f)
    NB = max(16, min(N_BUCKETS, n >> 1))
    if mx < mn:  # no finite score
        mn = mx = 0.0
    scale = (NB - 1) / (mx - mn) if mx > mn else 0.0
    start = np.zeros(NB + 1, np.int64)
    for x in range(lo, hi):
        f = _score_of(buf[x])
        bk = 0 if f == np.inf else _bucket(f, mn, scale, NB)
        start[bk + 1] += 1
    for i in range(NB):
        start[i + 1] += start[i]
    tmp = np.empty(n, np.uint64)
    for x in range(lo, hi):
        f = _score_of(buf[x])
        bk = 0 if f == np.inf else _bucket(f, mn, scale, NB)
        tmp[start[bk]] = buf[x]
        start[bk] += 1
    b0 = 0
    for bk in range(NB):  # start[bk] is now the end of bin bk
        b1 = start[bk]
        if b1 - b0 > 32:  # a crowded bin (many equal scores): a real sort, never quadratic
            _heapsort_desc(tmp, np.int64(b0), np.int64(b1))
        else:
            _insertion_desc(tmp, b0, b1)
        b0 = b1
    for x in range(n):
        buf[lo + x] = tmp[x]


@njit(cache=True, nogil=True)
def _band(no, ct, node_ids, logprobs, beam_scores, r0, nrows, n_internal, want, lo, hi_incl, buf, tmp, live, nl):
    """Composites of the candidates with lo <= score <= hi_incl, scored in one
    pass, keeping only about the best `want`: whenever the buffer fills, the threshold rises to the
    want-th best score kept so far and the buffer is compacted. Returns (count, final threshold):
    buf[:count] holds exactly the band's candidates scoring >= the final threshold; count -1 when more
    than len(buf) scores tie at the threshold (call again with a larger buf). Growing buf in here
    instead makes numba's code for the pass far slower (the array is reassigned inside the loop). live: skip
    children with no active ad (nl[child] == 0), as if absent."""
    cap = buf.shape[0]
    theta = lo
    n = 0
    c = 0
    for x in range(nrows):
        r = r0 + x
        node = node_ids[r]
        if not 0 <= node < n_internal:
            continue
        j0 = no[node]
        deg = no[node + 1] - j0
        bs = beam_scores[r]
        lpr = logprobs[r]
        # the gather and add vectorise in a loop of their own; the test-and-append loop then runs on
        # L1-resident scores
        for jj in range(deg):
            tmp[jj] = bs + lpr[ct[j0 + jj]]
        for jj in range(deg):
            if live and nl[j0 + jj + 1] <= 0:
                continue
            v = _clean(tmp[jj])
            if v >= theta and v <= hi_incl:  # one range test: a flag here slows numba's pass
                if v == 0:
                    v = np.float32(0.0)  # -0 ties +0, as in a float compare
                if n == cap:  # full: raise the threshold to the want-th best kept, keep those >= it
                    sc = np.empty(n, np.float32)
                    sel = np.empty(n, np.float32)  # reordered by the selection; sc stays aligned with buf
                    for z in range(n):
                        sc[z] = _score_of(buf[z])
                        sel[z] = sc[z]
                    theta = max(theta, _kth_smallest(sel, np.int64(n), np.int64(n - want)))
                    m = 0
                    for z in range(n):
                        if sc[z] >= theta:
                            buf[m] = buf[z]
                            m += 1
                    n = m
                    if not v >= theta:
                        continue
                    if n == cap:  # more than cap scores tie at the threshold: the band must hold every
                        return -1, theta  # candidate >= theta, so the caller retries with a larger buffer
                buf[n] = _composite(v, c + jj)
                n += 1
        c += deg
    return n, theta


@njit(cache=True, nogil=True)
def _select_buckets(t, q, b, r0, r1, node_ids, logprobs, beam_scores, k, gtm, count_all,
                    out_parent, out_token, out_node, out_score, out_count):
    """Top-k of request b for small requests: score every candidate into an array, bucket the scores,
    and test GTM bucket by bucket from the best (lazy windows grown by the pass rate)."""
    no, ct = t.node_offsets, t.child_tokens
    jag, lvl_off, lvl_base, lvl_width, part_off = t.jagged, t.level_offsets, t.level_base, t.level_width, t.part_offsets
    pbm, pbl, bmt, blt, blb = t.part_bitmask, t.part_bloom, t.bitmask_table, t.bloom_table, t.bloom_base
    qbm, soff, sigs = q.bitmask, q.sig_off, q.sigs
    live, nl = t.live[0] != 0, t.node_live
    n_internal = no.shape[0] - 1
    nrows = r1 - r0
    row_start = np.empty(nrows + 1, np.int64)
    C = 0
    for x in range(nrows):
        row_start[x] = C
        n = node_ids[r0 + x]
        if 0 <= n < n_internal:
            C += no[n + 1] - no[n]
    row_start[nrows] = C
    # One pass writes only the scores (4 bytes a candidate): candidate i is identified by its index,
    # which orders candidates by (row, token); row and child are recovered for the few that matter.
    score = np.empty(C, np.float32)
    dead = np.zeros(C if live else 1, np.bool_)  # a child with no active ad: never a candidate
    n_live = C
    c = 0
    mn, mx = np.inf, -np.inf
    for x in range(nrows):
        r = r0 + x
        n = node_ids[r]
        if not 0 <= n < n_internal:
            continue
        bs = beam_scores[r]
        for j in range(no[n], no[n + 1]):
            v = _clean(np.float32(bs + logprobs[r, ct[j]]))
            if v == 0:
                v = np.float32(0.0)  # -0 ties +0 in the composite sort below, as in a float compare
            score[c] = v
            if live and nl[j + 1] <= 0:
                dead[c] = True
                n_live -= 1
            elif v > -np.inf:
                mn = min(mn, v)
                mx = max(mx, v)
            c += 1
    NB = max(64, min(N_BUCKETS, C >> 2))  # fewer buckets for small requests: their fixed cost dominates
    mn, mx, plus = _finite_range(score, np.int64(C), mn, mx)
    scale = (NB - 1) / (mx - mn) if mx > mn else 0.0
    cum = np.zeros(NB, np.int64)
    for i in range(C):
        if live and dead[i]:
            score[i] = -np.inf  # (a dead +inf would reach the bucketing unclamped)
            continue
        cum[_bucket(score[i], mn, scale, NB)] += 1
    for i in range(1, NB):
        cum[i] += cum[i - 1]
    # Lazy GTM in score order: each round tests only the candidates of buckets (lo, hi]; the window
    # grows by the observed pass rate until k pass. Same answer as filter-then-top-k.
    sel = np.empty(C, np.int64)
    ns = 0
    lo, target = -1, k
    slots = CACHE_SLOTS if (gtm and count_all) else 1  # only the full count tests node by node
    cache_key = np.full(slots, -1, np.int64)
    cache_val = np.zeros(slots, np.bool_)
    qi = np.empty(GTM_BATCH, np.int64)
    qn = np.empty(GTM_BATCH, np.int64)
    qok = np.empty(GTM_BATCH, np.bool_)
    qs0, qs1, qtodo = np.empty(GTM_BATCH, np.int64), np.empty(GTM_BATCH, np.int64), np.empty(GTM_BATCH, np.bool_)
    words = request_words(qbm, soff, sigs, b)
    while True:
        hi = lo + 1
        while hi < NB - 1 and cum[hi] < target:
            hi += 1
        nq = 0
        x = 0  # row cursor (i ascends)
        for i in range(C + 1):
            if i < C:
                if live and dead[i]:
                    continue
                bk = _bucket(score[i], mn, scale, NB)
                if not lo < bk <= hi:
                    continue
                if not gtm:
                    sel[ns] = i
                    ns += 1
                    continue
                x = _row_after(row_start, x, i)
                qi[nq] = i
                qn[nq] = no[node_ids[r0 + x]] + (i - row_start[x]) + 1
                nq += 1
            if nq == GTM_BATCH or (i == C and nq > 0):  # test GTM on a batch of window candidates
                _gtm_batch(jag, lvl_off, lvl_base, lvl_width, part_off, pbm, pbl, bmt, blt, blb, qbm, soff,
                           sigs, b, qn, nq, qok, qs0, qs1, qtodo, words)
                for z in range(nq):
                    if qok[z]:
                        sel[ns] = qi[z]
                        ns += 1
                nq = 0
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
            if not (live and dead[i]) and _bucket(score[i], mn, scale, NB) > hi:
                x = _row_of(row_start, i)
                n = node_ids[r0 + x]
                child = no[n] + (i - row_start[x]) + 1
                total += _gtm(jag, lvl_off, lvl_base, lvl_width, part_off, pbm, pbl, bmt, blt, blb, qbm, soff, sigs, b, child,
                            cache_key, cache_val)
        out_count[b] = total
    else:
        out_count[b] = -1 if gtm else n_live
    for i in plus:
        score[i] = np.inf  # bucketed as the best finite score, ranked as itself
    # Order the passers by distinct uint64 composites (sortable score << 32 | ~index): score desc, then
    # candidate index asc = (row asc, token asc).
    comp = np.empty(ns, np.uint64)
    for x in range(ns):
        comp[x] = _composite(score[sel[x]], sel[x])
    # counts passed as np.int64: a counter's first type in numba's inference is Literal[int](0), and
    # a callee typed with it is compiled a second time (seconds of a first run)
    _sort_desc(comp, np.int64(0), np.int64(ns))
    _emit(no, ct, node_ids, r0, row_start, comp, np.int64(ns), b, k, out_parent, out_token, out_node, out_score)


@njit(cache=True, nogil=True)
def _select_band(t, q, b, r0, r1, node_ids, logprobs, beam_scores, k, gtm, count_all,
                    out_parent, out_token, out_node, out_score, out_count, rate_hint):
    """Top-k of request b: one scoring pass keeps about the best `want` candidates (a threshold that
    rises as the pass goes, see _band), they are sorted, and GTM is tested best first in chunks sized
    by the pass rate seen so far (each chunk in (row, token) order, where neighbouring nodes share
    table rows). If fewer than k pass, the next band below is scored the same way. Same answer as
    filter-then-top-k: every candidate above the k-th passer has been tested.

    rate_hint[d]: the GTM pass rate last seen for children at depth d (the caller keeps it across
    calls). It only sizes the first band (about k / rate candidates): a wrong hint costs time, never
    changes the answer."""
    no, ct = t.node_offsets, t.child_tokens
    jag, lvl_off, lvl_base, lvl_width, part_off = t.jagged, t.level_offsets, t.level_base, t.level_width, t.part_offsets
    pbm, pbl, bmt, blt, blb = t.part_bitmask, t.part_bloom, t.bitmask_table, t.bloom_table, t.bloom_base
    qbm, soff, sigs = q.bitmask, q.sig_off, q.sigs
    live, nl = t.live[0] != 0, t.node_live
    n_internal = no.shape[0] - 1
    nrows = r1 - r0
    row_start = np.empty(nrows + 1, np.int64)
    C = 0
    n_live = 0  # candidates on a node with an active ad (all of them when nothing is paused)
    widest = 1
    depth = -1
    for x in range(nrows):
        row_start[x] = C
        n = node_ids[r0 + x]
        if 0 <= n < n_internal:
            C += no[n + 1] - no[n]
            widest = max(widest, no[n + 1] - no[n])
            if depth < 0:
                depth = _depth(lvl_off, n) + 1  # the children's depth
            if live:
                for j in range(no[n], no[n + 1]):
                    n_live += nl[j + 1] > 0
    row_start[nrows] = C
    if not live:
        n_live = C
    test_all = gtm and count_all
    tmp = np.empty(widest, np.float32)
    passed = np.empty(C if test_all else k + GTM_BATCH + 1, np.uint64)
    npass = 0
    ntested = 0
    qn = np.empty(GTM_BATCH, np.int64)
    qc = np.empty(GTM_BATCH, np.uint64)
    qok = np.empty(GTM_BATCH, np.bool_)
    qs0, qs1, qtodo = np.empty(GTM_BATCH, np.int64), np.empty(GTM_BATCH, np.int64), np.empty(GTM_BATCH, np.bool_)
    words = request_words(qbm, soff, sigs, b)
    lo, hi_incl = -np.inf, np.float32(np.inf)
    hint = rate_hint[depth] if depth >= 0 else 1.0
    # GTM pass rate so far; the first chunk is sized by the rate last seen at this depth (from 100% it took
    # two or three selections over the band at depth 3's 37%)
    rate = min(max(hint, 1.0 / 64.0), 1.0) if gtm else 1.0
    want = C if test_all else (k if not gtm else int(k * 1.2 / min(max(hint, 1.0 / 16.0), 1.0)) + 1)
    while True:
        want = max(1, min(want, C))
        buf = np.empty(min(C, 2 * want + 1024), np.uint64)
        nbuf, theta = _band(no, ct, node_ids, logprobs, beam_scores, r0, nrows, n_internal, want, lo, hi_incl,
                            buf, tmp, live, nl)
        while nbuf < 0:  # ties overflowed the buffer (rare): again with twice the room (at most C: then it fits)
            buf = np.empty(min(C, 2 * buf.shape[0]), np.uint64)
            nbuf, theta = _band(no, ct, node_ids, logprobs, beam_scores, r0, nrows, n_internal, want, lo, hi_incl,
                                buf, tmp, live, nl)
        # Walk the band best first in chunks sized by the pass rate seen so far: a chunk is the m best
        # left (a selection on the composites, no sort), taken from buf in its (row, token) order,
        # where neighbouring nodes share table rows and the cache serves them.
        nrem = nbuf
        scratch = np.empty(nrem, np.uint64)
        while nrem > 0 and (npass < k or test_all):
            if not gtm:
                m = min(nrem, k - npass)
            elif test_all:
                m = nrem
            else:
                m = min(nrem, max(GTM_BATCH, int((k - npass) / rate * 1.15) + 1))
            cut = np.uint64(0)
            if m < nrem:  # the selection reorders its input: buf keeps candidate order for the walk below
                for z in range(nrem):
                    scratch[z] = buf[z]
                cut = _kth_smallest(scratch, np.int64(nrem), np.int64(nrem - m))
            keep = 0
            nq = 0
            x = 0  # row cursor: buf keeps candidate order, so the chunk's indices ascend
            for z in range(nrem + 1):
                if z < nrem:
                    cz = buf[z]
                    if cz < cut:
                        buf[keep] = cz  # not in this chunk: stays for the next one, in order
                        keep += 1
                        continue
                    if not gtm:
                        passed[npass] = cz
                        npass += 1
                        continue
                    i = np.int64(LOW32 - (cz & LOW32))
                    x = _row_after(row_start, x, i)
                    qc[nq] = cz
                    qn[nq] = no[node_ids[r0 + x]] + (i - row_start[x]) + 1
                    nq += 1
                if nq == GTM_BATCH or (z == nrem and nq > 0):
                    _gtm_batch(jag, lvl_off, lvl_base, lvl_width, part_off, pbm, pbl, bmt, blt, blb, qbm, soff,
                               sigs, b, qn, nq, qok, qs0, qs1, qtodo, words)
                    for y in range(nq):
                        if qok[y]:
                            if npass == passed.shape[0]:  # a chunk may pass more than k: keep room
                                grown = np.empty(2 * passed.shape[0], np.uint64)
                                for z2 in range(npass):
                                    grown[z2] = passed[z2]
                                passed = grown
                            passed[npass] = qc[y]
                            npass += 1
                    nq = 0
            nrem = keep
            ntested += m
            rate = max(npass / ntested, 1.0 / 64.0)
        if npass >= k or theta == -np.inf or test_all:
            break
        # fewer than k passed in [theta, hi): the band below it, sized by the pass rate seen so far
        want = int((k - npass) / rate * 1.25) + 1
        # strictly below theta: the largest float32 under it is the band's (inclusive) top
        hi_incl, lo = np.nextafter(np.float32(theta), np.float32(-np.inf)), -np.inf
    if gtm and ntested > 0 and depth >= 0:
        rate_hint[depth] = npass / ntested  # racy between requests on purpose: any recent rate will do
    out_count[b] = npass if test_all else (-1 if gtm else n_live)
    _sort_desc(passed, np.int64(0), np.int64(npass))  # np.int64: see _select_buckets
    _emit(no, ct, node_ids, r0, row_start, passed, np.int64(npass), b, k, out_parent, out_token, out_node,
          out_score)


BAND_FROM = 16384  # candidates of one request from which the band selection pays off (measured)


@njit(cache=True, nogil=True)
def _select_request(t, q, b, r0, r1, node_ids, logprobs, beam_scores, k, gtm, count_all,
                    out_parent, out_token, out_node, out_score, out_count, rate_hint, band_from):
    """Both selections give the same answer; the band one reads the log-probs in one pass and keeps
    only the best few thousand, which wins on large requests, while its fixed costs (selection on
    composites, final sort) lose on small ones (benchmarks/results/step_cpu_cpu2.md)."""
    no = t.node_offsets
    n_internal = no.shape[0] - 1
    C = 0
    for r in range(r0, r1):
        n = node_ids[r]
        if 0 <= n < n_internal:
            C += no[n + 1] - no[n]
    if C >= band_from:
        _select_band(t, q, b, r0, r1, node_ids, logprobs, beam_scores, k, gtm, count_all,
                     out_parent, out_token, out_node, out_score, out_count, rate_hint)
    else:
        _select_buckets(t, q, b, r0, r1, node_ids, logprobs, beam_scores, k, gtm, count_all,
                        out_parent, out_token, out_node, out_score, out_count)
