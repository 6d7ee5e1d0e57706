"""Fuzz kind "online": hostile inputs to the serving calls on the untouched fixtures.

Non-finite and huge floats, out-of-range ids, wrong dtypes and shapes, odd k / beam widths, hand-made
Request and RequestBatch objects, odd user values, trie searches. Each input is labelled: "bad"
inputs must be refused with one line; "odd" ones may be refused or answered; everything else, and
every answer given, must equal the plain-Python reference (NaN ranks as -inf, +inf above every finite
score; ids outside the tables are dead)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq

from ..inputs.schema import parse_schema
from ..matcher.arrays import RequestBatch
from ..targeting.semantics import Request
from .trie import NarProposals, RefTrie, ref_beam_search
from .gtm import step_reference
from .fuzz_core import OK_SAME, REFUSED, Wrong, classify
from .fuzz_fixtures import compare_step, postfilter_reference, same_ads
from .fuzz_gen import check_against_catalog, random_user

SPECIAL = [np.nan, np.inf, -np.inf, 3e38, -3e38, 1e-45, -0.0]
K_VALUES = [(1, ""), (2, ""), (4, ""), (7, ""), (np.int64(3), ""), (0, "bad"), (-1, "bad"), (2.5, "bad"),
            (10**12, "bad"), ("3", "bad"), (None, "bad"), (True, "odd")]


class Inputs:
    """What a case fed in: labels of the bad and odd parts ("free": odd, and no reference answer to
    compare with, e.g. a NaN threshold). Every mark updates the case's note."""

    def __init__(self, ctx: dict, target: str):
        self.bad, self.odd, self.info, self.free = [], [], [], False
        self.ctx, self.target = ctx, target
        ctx["note"] = f"{target}: valid input"

    def mark(self, label: str, what: str) -> None:
        if label == "bad":
            self.bad.append(what)
        elif label in ("odd", "free"):
            self.odd.append(what)
            self.free |= label == "free"
        elif label == "info":  # valid, recorded for the failure's description only
            self.info.append(what)
        if label:
            self.ctx["note"] = f"{self.target}: {', '.join(self.bad + self.odd + self.info)}"


def expect(inputs: Inputs, call, check) -> str:
    """Run call(); a one-line refusal is fine for bad or odd inputs; an answer is wrong for bad
    inputs and otherwise goes to check(answer), which raises Wrong on a mismatch."""
    try:
        answer = call()
    except Exception as exc:  # noqa: BLE001
        outcome, detail = classify(exc)
        if outcome != REFUSED:
            raise
        if inputs.bad or inputs.odd:
            return REFUSED
        raise Wrong(f"refused a valid input: {detail}") from None
    if inputs.bad:
        raise Wrong(f"accepted {', '.join(inputs.bad)}")
    if not inputs.free:
        check(answer)
    return OK_SAME


def _specials(rng, a: np.ndarray, n_max: int, inputs: "Inputs", what: str) -> None:
    """Put non-finite, huge, denormal or -0.0 values into a few places of a (valid input)."""
    vals = [SPECIAL[int(rng.integers(len(SPECIAL)))] for _ in range(int(rng.integers(1, n_max + 1)))]
    for p, v in zip(rng.integers(0, a.size, size=len(vals)), vals):
        a.flat[int(p)] = v
    inputs.mark("info", f"{what} holding {', '.join(sorted({str(v) for v in vals}))}")


def _bad_ids(rng, ids: np.ndarray, choices, inputs: Inputs, what: str):
    """Replace a few ids by out-of-range ones; -> (ids for the call, int64 ids for the reference)."""
    out = ids.astype(object)
    for p in rng.integers(0, len(out), size=int(rng.integers(1, 3))):
        out[int(p)] = choices[int(rng.integers(len(choices)))]
    ref = np.array([x if -2**63 <= x < 2**63 else -1 for x in out], np.int64)
    if any(not -2**63 <= x < 2**63 for x in out):
        inputs.mark("odd", f"{what} beyond int64")
        return list(out), ref
    return ref.copy(), ref


def _step(rng, idx, m, reqs, inputs: Inputs) -> str:
    B = len(reqs)
    per = int(rng.integers(1, 5))
    d = int(rng.integers(idx.sid_length))
    lo, hi = int(idx.level_offsets[d]), int(idx.level_offsets[d + 1])
    nodes = rng.integers(lo, hi, size=B * per).astype(np.int64)
    ref_nodes = nodes
    if rng.random() < 0.4:
        nodes, ref_nodes = _bad_ids(rng, nodes, [-1, -7, idx.first_leaf, idx.num_nodes, idx.num_nodes + 5,
                                                 2**31 - 1, 2**31, 2**63 - 1, -2**63, 2**64], inputs, "node id")
    rr = np.repeat(np.arange(B), per)
    lp = np.round(rng.normal(size=(len(rr), idx.vocab_size)), 1).astype(np.float32)
    bs = np.round(rng.normal(size=len(rr)), 1).astype(np.float32)
    if rng.random() < 0.7:
        _specials(rng, lp, 6, inputs, "log-probs")
    if rng.random() < 0.4:
        _specials(rng, bs, 2, inputs, "beam scores")
    call_lp, call_bs = lp, bs
    r = rng.random()
    if r < 0.1:
        call_lp = lp.astype(np.float64)
    elif r < 0.15:
        call_lp = lp.astype(np.float16)
        lp = call_lp.astype(np.float32)
    elif r < 0.2:
        call_lp = lp[:, :-1] if rng.random() < 0.5 else lp[:-1]
        inputs.mark("bad", f"log-probs of shape {list(call_lp.shape)}")
    elif r < 0.23:
        call_lp = np.full(lp.shape, "x", object)
        inputs.mark("bad", "log-probs of strings")
    elif r < 0.26:
        call_bs = np.concatenate([bs, bs[:1]])
        inputs.mark("bad", "one beam score too many")
    call_rr = rr
    if rng.random() < 0.08:
        call_rr = rr[::-1].copy() if B > 1 else rr + B
        inputs.mark("bad", "row_request out of order or range")
    k, label = K_VALUES[int(rng.integers(len(K_VALUES)))]
    inputs.mark(label, f"k={k!r}")
    gtm = bool(rng.random() < 0.6)
    kk = int(k) if label != "bad" else 1
    return expect(inputs, lambda: m.step(nodes, call_lp, call_bs, call_rr, reqs, k, gtm=gtm, count_candidates=True),
                  lambda st: compare_step(st, step_reference(idx, ref_nodes, lp, bs, rr, reqs, kk, gtm), "online"))


def _postfilter(rng, idx, m, reqs, inputs: Inputs) -> str:
    M = int(rng.integers(1, 6))
    leaves = rng.integers(idx.first_leaf, idx.num_nodes, size=(len(reqs), M)).astype(np.int64)
    ref = leaves.copy()
    if rng.random() < 0.6:
        flat, ref_flat = _bad_ids(rng, leaves.reshape(-1), [-1, 0, idx.first_leaf - 1, idx.num_nodes, 10**9,
                                                           2**31, -5, 2**63 - 1, 2**64], inputs, "leaf id")
        leaves = np.array(flat, dtype=object if isinstance(flat, list) else np.int64).reshape(leaves.shape)
        ref = ref_flat.reshape(leaves.shape)
    if rng.random() < 0.1:
        leaves = leaves[0] if rng.random() < 0.5 else np.concatenate([leaves, leaves[:1]])
        inputs.mark("bad", f"leaf_nodes of shape {list(np.shape(leaves))}")

    def check(got):
        for b in range(len(reqs)):
            same_ads(got[b], postfilter_reference(idx, ref[b], reqs[b]), f"post-filter request {b}")

    return expect(inputs, lambda: m.postfilter(leaves, reqs), check)


def _eligible(rng, idx, m, reqs, inputs: Inputs) -> str:
    N = idx.num_ads
    req = reqs[0]
    if rng.random() < 0.5:
        rows = rng.integers(0, N, size=6).astype(np.int64)
        rows, ref = _bad_ids(rng, rows, [-1, N, N + 1, 10**9, 2**63 - 1, -2**63], inputs, "ad row")
        inputs.mark("odd", "ad rows outside the table")

        def check(got):
            want = [bool(r >= 0 and r < N and postfilter_ok(idx, int(r), req)) for r in ref]
            if list(map(bool, got)) != want:
                raise Wrong(f"eligible_rows {list(map(bool, got))} != reference {want}")

        return expect(inputs, lambda: idx.eligible_rows(rows, req), check)
    ids = [int(x) for x in rng.choice(np.asarray(idx.sid_ad_ids), size=4)]
    ids[int(rng.integers(4))] = [2**70, -1, 0, 2**63 - 1, 1.5][int(rng.integers(5))]
    inputs.mark("odd", "unknown ad id")
    return expect(inputs, lambda: idx.ad_eligible(ids, req), lambda got: None)


def postfilter_ok(idx, row: int, req) -> bool:
    s = int(np.searchsorted(np.asarray(idx.sid_ad_offsets), row, side="right") - 1)
    ads, _ = postfilter_reference(idx, [idx.first_leaf + s], req)
    return int(idx.sid_ad_ids[row]) in ads


def _request(rng, idx, m, reqs, inputs: Inputs) -> str:
    """A hand-made Request (arbitrary bits are a valid request; wrong shapes are not)."""
    q = reqs[0]
    bm, sigs, codes = q.bitmask.copy(), list(q.bloom_sigs), list(q.bloom_codes)
    r = rng.random()
    if r < 0.3:
        bm = rng.integers(0, 2**63, size=bm.shape, dtype=np.uint64) << np.uint64(int(rng.integers(2)))
    elif r < 0.4:
        bm = bm[:, :0] if rng.random() < 0.5 else np.concatenate([bm, bm], axis=1)
        inputs.mark("bad", f"bitmask of shape {list(bm.shape)}")
    elif r < 0.5:
        bm = bm.astype(np.float64)
        inputs.mark("free", "bitmask of floats")
    elif r < 0.6 and sigs:
        sigs[0] = sigs[0][:, :-1] if rng.random() < 0.5 else np.concatenate([sigs[0], sigs[0]], axis=1)
        inputs.mark("bad", f"Bloom signatures of shape {list(sigs[0].shape)}")
    elif r < 0.7 and sigs:
        sigs = sigs[:-1]
        inputs.mark("bad", "a Bloom attribute missing")
    elif r < 0.85 and codes:
        codes[0] = np.array([2**40, -5, 10**6, 0], np.int64)
    elif sigs:
        sigs[0] = np.zeros((0, sigs[0].shape[1]), np.uint64)
        inputs.mark("odd", "no Bloom signature")
    hand = Request(bm, tuple(sigs), tuple(codes))
    rqs = [hand] + list(reqs[1:])
    d = int(rng.integers(idx.sid_length))
    nodes = np.tile(np.arange(int(idx.level_offsets[d]), int(idx.level_offsets[d + 1]))[:8], len(rqs))
    rr = np.repeat(np.arange(len(rqs)), len(nodes) // len(rqs))
    lp = np.round(rng.normal(size=(len(nodes), idx.vocab_size)), 1).astype(np.float32)
    bs = np.zeros(len(nodes), np.float32)
    leaves = np.tile(np.arange(idx.first_leaf, idx.num_nodes), (len(rqs), 1))

    def both():
        return m.step(nodes, lp, bs, rr, rqs, 3, gtm=True), m.postfilter(leaves, rqs)

    def check(got):
        compare_step(got[0], step_reference(idx, nodes, lp, bs, rr, rqs, 3, True), "hand-made request")
        for b in range(len(rqs)):
            same_ads(got[1][b], postfilter_reference(idx, leaves[b], rqs[b]), f"post-filter request {b}")

    return expect(inputs, both, check)


def _batch(rng, idx, m, reqs, inputs: Inputs) -> str:
    """A RequestBatch built by hand with inconsistent offsets: never an answer."""
    q = m.batch(reqs)
    sig_off, code_off = q.sig_off.copy(), q.code_off.copy()
    what = int(rng.integers(4))
    if what == 0:
        sig_off[-1, -1] = len(q.sigs) + int(rng.integers(1, 10**6))
    elif what == 1:
        code_off[0, 0] = -int(rng.integers(1, 10**6))
    elif what == 2:
        sig_off[0] = sig_off[0][::-1].copy() if sig_off.shape[1] > 1 and sig_off[0, -1] > 0 else sig_off[0] + 10**9
    else:
        code_off[-1, -1] = 2**62
    inputs.mark("bad", f"RequestBatch with inconsistent offsets ({what})")
    bad = RequestBatch(q.bitmask, sig_off, q.sigs, code_off, q.codes)
    nodes = np.zeros(len(reqs), np.int64)
    lp = np.zeros((len(reqs), idx.vocab_size), np.float32)
    leaves = np.tile(np.arange(idx.first_leaf, idx.num_nodes), (len(reqs), 1))
    if rng.random() < 0.5:
        return expect(inputs, lambda: m.step(nodes, lp, np.zeros(len(reqs)), np.arange(len(reqs)), bad, 4), None)
    return expect(inputs, lambda: m.postfilter(leaves, bad), None)


ODD_USER_VALUES = [("\ud800", "odd"), ("", "odd"), (b"US", "bad"), (5, "bad"), (float("nan"), "bad"),
                   ([["US"]], "bad"), ({"a": 1}, "bad"), (None, ""), ([], ""), (["US"] * 300, "")]


def _user(rng, idx, m, reqs, inputs: Inputs, ctx) -> str:
    spec = ctx["spec"]
    user = random_user(rng, spec)
    names = sorted(spec["bitmask"]) + sorted(spec["bloom"])
    labels = {}  # the label of each key's final value (a later edit of a key replaces the earlier)
    for _ in range(int(rng.integers(1, 3))):
        v, label = ODD_USER_VALUES[int(rng.integers(len(ODD_USER_VALUES)))]
        r = rng.random()
        key = str(rng.choice(names)) if r < 0.8 else ["nope", 5, "_meta"][int(rng.integers(3))]
        user[key] = v
        label = "bad" if key in ("nope", 5) else "" if key == "_meta" else label  # "_" keys are metadata
        labels[key] = (label or "info", f"user[{key!r}] = {v!r}"[:60])
    for label, what in labels.values():
        inputs.mark(label, what)
    table = pq.read_table(ctx["catalog"])
    return expect(inputs, lambda: idx.encode_request(user),
                  lambda q: check_against_catalog(idx, table, parse_schema(spec), [user], rng))


def _trie(rng, ctx, inputs: Inputs) -> str:
    from .. import SuccinctTrie, trie_beam_search

    trie = SuccinctTrie.load(ctx["paths"]["trie"], verify=False)
    tok, lp = (x.copy() for x in ctx["proposals"])
    tok = tok[:int(rng.integers(1, len(tok) + 1))]
    lp = lp[:len(tok)]
    call_tok = tok
    if rng.random() < 0.4:
        flat, ref = _bad_ids(rng, tok.reshape(-1), [-1, 2**31, 2**63 - 1, -2**63, 2**64, 2**32 + 1], inputs, "token")
        call_tok = np.array(flat, dtype=object if isinstance(flat, list) else np.int64).reshape(tok.shape)
        tok = ref.reshape(tok.shape)
    if rng.random() < 0.7:
        _specials(rng, lp, 4, inputs, "logp")
    call_lp = lp
    r = rng.random()
    if r < 0.08:
        call_lp = lp[:, :, :-1]
        inputs.mark("bad", f"logp of shape {list(call_lp.shape)}")
    elif r < 0.12:
        call_tok = tok.astype(np.float64) + 0.5
        inputs.mark("bad", "fractional tokens")
    bw, label = K_VALUES[int(rng.integers(len(K_VALUES)))]
    inputs.mark(label, f"beam_width={bw!r}")
    thetas = [(-math.inf, ""), (-2.0, ""), (math.inf, ""), (math.nan, "free")]
    (tt, l1), (ts, l2) = (thetas[int(rng.integers(4))] for _ in range(2))
    alpha, l3 = [(0.0, ""), (0.0, ""), (math.nan, "free"), (math.inf, "free")][int(rng.integers(4))]
    for label, what in ((l1, f"theta_tok={tt}"), (l2, f"theta_sent={ts}"), (l3, f"alpha={alpha}")):
        inputs.mark(label, what)
    ref = RefTrie(ctx["keys"])

    def check(got):
        ids, scores = got
        w = int(bw)
        for b in range(len(tok)):
            want_ids, want_sc = ref_beam_search(ref, NarProposals(tok[b], lp[b]), w, tt, ts, alpha)
            g_ids = np.asarray(ids[b]).tolist()
            g_sc = np.asarray(scores[b], np.float64)
            if g_ids != want_ids + [-1] * (w - len(want_ids)) or not np.allclose(
                    g_sc[:len(want_ids)], want_sc, rtol=0, atol=1e-5, equal_nan=True) or \
                    not np.all(np.isneginf(g_sc[len(want_ids):])):
                raise Wrong(f"trie search query {b}: {g_ids} {g_sc.tolist()} != reference {want_ids} {want_sc}")

    return expect(inputs, lambda: trie_beam_search(trie, call_tok, call_lp, bw, tt, ts, alpha), check)


TARGETS = ("step", "step", "postfilter", "eligible", "request", "batch", "user", "trie", "trie")


def case(rng, ctx) -> str:
    from .. import Matcher, load_index

    target = TARGETS[int(rng.integers(len(TARGETS)))]
    inputs = Inputs(ctx, target)
    if target == "trie":
        out = _trie(rng, ctx, inputs)
    else:
        idx = load_index(ctx["paths"][["fixed", "jagged"][int(rng.integers(2))]], verify=False)
        m = Matcher(idx)
        users = ctx["users"][:int(rng.integers(1, len(ctx["users"]) + 1))]
        reqs = [idx.encode_request(u) for u in users]
        fn = {"step": _step, "postfilter": _postfilter, "eligible": _eligible, "request": _request,
              "batch": _batch}.get(target)
        out = fn(rng, idx, m, reqs, inputs) if fn else _user(rng, idx, m, reqs, inputs, ctx)
    return out
