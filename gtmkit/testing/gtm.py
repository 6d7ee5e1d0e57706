"""Plain-Python references, slow and obviously right, that the fast paths are tested against.

They work from the catalog's raw strings (pyarrow rows), not from any encoding gtmkit builds."""

from __future__ import annotations

import numpy as np

from ..targeting.semantics import BitmaskLayout, bitmask_ad_row, bloom_ad_row


def catalog_rows(table, schema) -> list:
    """The catalog as a list of dicts: ad_id, sid tuple, and per attribute (allowed, excluded) sets."""
    cols = {c: table.column(c).to_pylist() for c in schema.columns()}
    out = []
    for i in range(table.num_rows):
        ad = {"ad_id": cols[schema.ad_id_column][i], "sid": tuple(cols[schema.sid_column][i])}
        for a in (*schema.bitmask, *schema.bloom):
            allow = cols[a.column][i]
            excl = cols[a.exclude_column][i] if a.exclude_column else None
            allow = [allow] if isinstance(allow, str) else (allow or [])
            excl = [excl] if isinstance(excl, str) else (excl or [])
            ad[a.name] = (set(allow), set(excl))
        out.append(ad)
    return out


def _request_values(user: dict, name: str) -> list:
    v = user.get(name)
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)


def eligible(ad: dict, user: dict, schema) -> bool:
    """docs/design.md §2, read literally. A missing bitmask value is `other`: it meets only untargeted ads."""
    for a in schema.bitmask:
        allow, excl = ad[a.name]
        vals = _request_values(user, a.name) or [None]
        if not any(v not in excl and (not allow or v in allow) for v in vals):
            return False
    for a in schema.bloom:
        allow, excl = ad[a.name]
        vals = set(_request_values(user, a.name))
        if allow and not (allow & vals):
            return False
        if excl & vals:
            return False
    return True


def ad_matcher_rows(ad: dict, schema, layout: BitmaskLayout) -> tuple:
    """(bitmask row, [bloom row per attribute]) of one ad, from the reference encoders."""
    bm = bitmask_ad_row(layout, [ad[a.name][0] for a in schema.bitmask], [ad[a.name][1] for a in schema.bitmask])
    blooms = [bloom_ad_row(sorted(ad[a.name][0]), a.bits, a.hashes, a.seed) for a in schema.bloom]
    return bm, blooms


def union_rows(rows: list) -> np.ndarray:
    out = rows[0].copy()
    for r in rows[1:]:
        out |= r
    return out


def live_nodes(index, active_sids) -> set:
    """The nodes on the path of some SID (a tuple of tokens) of an active ad: CD keeps these, once ads are paused."""
    out = {0}
    for sid in active_sids:
        n = 0
        for tok in sid:
            n = index.child(n, int(tok))
            out.add(n)
    return out


def step_reference(index, node_ids, logprobs, beam_scores, row_request, requests, k, gtm=True, live=None):
    """CD+GTM step by brute force: every child of every live row, GTM via Index.node_passes, full sort.
    A row whose node id is not an internal node is dead. A candidate scores float32(beam_score +
    logprob), overflow going to +-inf; NaN scores as -inf; order: score desc (+inf first, -inf
    candidates last but kept), then row asc, then token asc. live: the nodes that hold an active ad
    (live_nodes), when ads are paused; the others are not children.
    Returns (parent_rows, tokens, nodes, scores, num_candidates) per request."""
    B = len(requests)
    cands = [[] for _ in range(B)]
    for r, n in enumerate(node_ids):
        if not 0 <= int(n) < index.first_leaf:
            continue
        b = int(row_request[r])
        toks, kids = index.children(int(n))
        for tok, kid in zip(toks, kids):
            if live is not None and int(kid) not in live:
                continue
            if gtm and not index.node_passes(int(kid), requests[b]):
                continue
            with np.errstate(over="ignore", invalid="ignore"):
                s = np.float32(np.float32(beam_scores[r]) + np.float32(logprobs[r, tok]))
            s = np.float32(-np.inf) if np.isnan(s) else s
            cands[b].append((-float(s), r, int(tok), int(kid)))
    out = []
    for b in range(B):
        best = sorted(cands[b])[:k]
        out.append(([c[1] for c in best], [c[2] for c in best], [c[3] for c in best], [-c[0] for c in best],
                    len(cands[b])))
    return out


def mask_reference(index, node_ids, row_request, requests, gtm=True, live=None) -> np.ndarray:
    words = -(-index.vocab_size // 32)
    out = np.zeros((len(node_ids), words), np.uint32)
    for r, n in enumerate(node_ids):
        if not 0 <= int(n) < index.first_leaf:
            continue
        toks, kids = index.children(int(n))
        for tok, kid in zip(toks, kids):
            if live is not None and int(kid) not in live:
                continue
            if not gtm or index.node_passes(int(kid), requests[int(row_request[r])]):
                out[r, tok // 32] |= np.uint32(1 << (int(tok) % 32))
    return out.view(np.int32)
