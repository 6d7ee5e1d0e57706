"""GTM tests of trie nodes on the CPU (numba), docs/design.md §2: one node, or a batch side by side.

`t` is a TrieArrays and `q` a RequestBatch (gtmkit/matcher/arrays.py)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..._memory import prefetch

# Hot loops take plain arrays, unpacked once from the TrieArrays / RequestBatch namedtuples: reading
# an array field of a namedtuple inside a loop costs numba a reference-count round trip each time.


@njit(cache=True, nogil=True, inline="always")
def _depth(level_offsets, node):
    a, b = 0, level_offsets.shape[0] - 1
    while b - a > 1:  # largest d with level_offsets[d] <= node
        m = (a + b) >> 1
        if level_offsets[m] <= node:
            a = m
        else:
            b = m
    return a


@njit(cache=True, nogil=True, inline="always")
def _gtm(jagged, lvl_off, lvl_base, lvl_width, part_off, pbm, pbl, bmt, blt, blb, qbm, soff, sigs, b, node, ck, cv):
    """GTM (docs/design.md §2) of node for request b: some partition meets every bitmask attribute and holds
    a request signature for every Bloom attribute. ck/cv: a direct-mapped cache of partition results
    keyed by the partition's table rows (near the root many nodes share one deduplicated row);
    pass 1-slot arrays to disable it."""
    if jagged:
        s0, s1 = part_off[node], part_off[node + 1]
    else:
        d = _depth(lvl_off, node)
        w = lvl_width[d]
        s0 = lvl_base[d] + (node - lvl_off[d]) * w
        s1 = s0 + w
    nb = pbl.shape[1]
    W, Wb = bmt.shape[1], blt.shape[1]
    use_cache = ck.shape[0] > 1 and nb <= 1
    for p in range(s0, s1):
        bid = pbm[p]
        if bid < 0:
            break  # fixed layouts pad at the end
        slot = 0
        key = np.int64(bid)
        if use_cache:
            if nb == 1:
                key = (key << 32) | np.int64(pbl[p, 0])
            slot = (key * 0x9E3779B1 >> 7) & (ck.shape[0] - 1)
            if ck[slot] == key:
                if cv[slot]:
                    return True
                continue
        ok = True
        for a in range(qbm.shape[1]):
            hit = False
            for w in range(W):
                if bmt[bid, w] & qbm[b, a, w]:
                    hit = True
                    break
            if not hit:
                ok = False
                break
        k = 0
        while ok and k < nb:
            row = blb[k] + pbl[p, k]
            found = False
            for sg in range(soff[b, k], soff[b, k + 1]):
                inside = True
                for w in range(Wb):
                    if (blt[row, w] & sigs[sg, w]) != sigs[sg, w]:
                        inside = False
                        break
                if inside:
                    found = True
                    break
            ok = found
            k += 1
        if use_cache:
            ck[slot] = key
            cv[slot] = ok
        if ok:
            return True
    return False


CACHE_SLOTS = 4096
GTM_BATCH = 64


@njit(cache=True, nogil=True)
def request_words(qbm, soff, sigs, b):
    """Request b's nonzero words, for _gtm_batch: per bitmask attribute a, at a * (W + 1), the count n then
    the n word indices where qbm[b, a] has bits; then per signature of request b, in order, (Wb + 1)
    entries likewise. A test reads only those words: the other words of a request row are zero (an
    attribute's bits sit in one or two of the W words, a signature's k bits in at most k of Wb), and a
    zero word can neither meet a table row nor fail a containment test."""
    A, W = qbm.shape[1], qbm.shape[2]
    Wb = sigs.shape[1]
    s0, s1 = soff[b, 0], soff[b, soff.shape[1] - 1]
    out = np.zeros(A * (W + 1) + (s1 - s0) * (Wb + 1), np.int64)
    for a in range(A):
        o = a * (W + 1)
        for w in range(W):
            if qbm[b, a, w]:
                out[o] += 1
                out[o + out[o]] = w
    for sg in range(s0, s1):
        o = A * (W + 1) + (sg - s0) * (Wb + 1)
        for w in range(Wb):
            if sigs[sg, w]:
                out[o] += 1
                out[o + out[o]] = w
    return out


@njit(cache=True, nogil=True)
def _gtm_batch(jagged, lvl_off, lvl_base, lvl_width, part_off, pbm, pbl, bmt, blt, blb, qbm, soff, sigs, b,
               nodes, n, ok_out, s0, s1, todo, words):
    """_gtm for nodes[:n], partition by partition across the batch: the table rows of different nodes
    are independent loads, so their cache misses overlap instead of queueing one node at a time.
    The partition test is spelled out here as in _gtm on purpose: factored into a shared helper
    (inlined or not), numba's code for this loop runs the depth-1 step slower. s0, s1, todo: the caller's scratch of
    >= n entries (allocating them per batch is a large share of a depth-1 batch). words: request_words(.., b)."""
    widest = 0
    nb = pbl.shape[1]
    W, Wb = bmt.shape[1], blt.shape[1]
    A = qbm.shape[1]
    sig_words, sig0 = A * (W + 1), soff[b, 0]  # where request_words put the signatures' words
    for z in range(n):
        node = nodes[z]
        if jagged:
            s0[z], s1[z] = part_off[node], part_off[node + 1]
        else:
            d = _depth(lvl_off, node)
            w = lvl_width[d]
            s0[z] = lvl_base[d] + (node - lvl_off[d]) * w
            s1[z] = s0[z] + w
        todo[z] = True
        ok_out[z] = False
        widest = max(widest, s1[z] - s0[z])
        if s1[z] > s0[z]:  # the first partition's ids: every node's line requested before any is read
            prefetch(pbm, s0[z])
            prefetch(pbl, s0[z] * nb)
    # the last partition tested and its verdict: neighbouring nodes near the root often share their
    # deduplicated table rows (at depth 1 of the synth index all 512 nodes do), so a repeat costs a compare
    last_p, last_ok = np.int64(-1), False
    for j in range(widest):
        for z in range(n):  # the table rows of this round's partitions, all requested before any is read
            p = s0[z] + j
            if todo[z] and p < s1[z]:
                bid = pbm[p]  # (round 0: on its way since the loop above; later rounds: a neighbour's line)
                if bid >= 0:
                    prefetch(bmt, bid * W)
                    for k in range(nb):
                        prefetch(blt, (blb[k] + pbl[p, k]) * Wb)
        for z in range(n):
            if not todo[z]:
                continue
            p = s0[z] + j
            if p >= s1[z]:
                todo[z] = False
                continue
            bid = pbm[p]
            if bid < 0:  # fixed layouts pad at the end
                todo[z] = False
                continue
            if last_p >= 0 and bid == pbm[last_p]:
                same = True
                for k in range(nb):
                    if pbl[p, k] != pbl[last_p, k]:
                        same = False
                        break
                if same:
                    if last_ok:
                        ok_out[z] = True
                        todo[z] = False
                    continue
            ok = True
            for a in range(A):
                o = a * (W + 1)
                hit = False
                for u in range(words[o]):
                    w = words[o + 1 + u]
                    if bmt[bid, w] & qbm[b, a, w]:
                        hit = True
                        break
                if not hit:
                    ok = False
                    break
            k = 0
            while ok and k < nb:
                row = blb[k] + pbl[p, k]
                found = False
                for sg in range(soff[b, k], soff[b, k + 1]):
                    o = sig_words + (sg - sig0) * (Wb + 1)
                    inside = True
                    for u in range(words[o]):
                        w = words[o + 1 + u]
                        if (blt[row, w] & sigs[sg, w]) != sigs[sg, w]:
                            inside = False
                            break
                    if inside:
                        found = True
                        break
                ok = found
                k += 1
            last_p, last_ok = p, ok
            if ok:
                ok_out[z] = True
                todo[z] = False


@njit(cache=True, nogil=True)
def depth_of(t, node):
    return _depth(t.level_offsets, node)


@njit(cache=True, nogil=True)
def node_passes(t, q, b, node, depth=-1):
    """GTM of one node for request b (convenience form for cold paths; hot loops call _gtm)."""
    ck, cv = np.full(1, -1, np.int64), np.zeros(1, np.bool_)
    return _gtm(t.jagged, t.level_offsets, t.level_base, t.level_width, t.part_offsets, t.part_bitmask,
                t.part_bloom, t.bitmask_table, t.bloom_table, t.bloom_base, q.bitmask, q.sig_off, q.sigs,
                b, node, ck, cv)
