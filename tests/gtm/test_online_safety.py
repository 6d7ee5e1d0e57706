"""Online CPU API on hostile inputs: non-finite scores ranked as documented (equal to the plain-Python
reference, both selections), caller ids outside their tables dead or refused, request batches and step
arguments checked with one-line errors. Inputs that used to crash the process run in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gtmkit
from gtmkit.errors import GtmkitError, RequestError
from gtmkit.matcher.arrays import RequestBatch
from gtmkit.matcher.matcher import Matcher
from gtmkit.targeting.semantics import Request
from gtmkit.testing.gtm import step_reference

from support.catalogs import random_user
from support.indexes import _build

ROOT = Path(__file__).resolve().parents[2]
WEIRD = np.float32([np.nan, np.inf, -np.inf, 3e38, -3e38, 1e-45, 0.0, -0.0, -1.0, 2.0])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    idx, _, _ = _build(tmp_path_factory.mktemp("online"), 21, "dynamic", {"target_fill": 0.3, "k_max": 4},
                       n_ads=150, L=3, V=6)
    rng = np.random.default_rng(0)
    return idx, [idx.encode_request(random_user(rng)) for _ in range(3)]


def one_line_error(fn, exc=GtmkitError):
    with pytest.raises(exc) as e:
        fn()
    assert "\n" not in str(e.value) and str(e.value)
    return str(e.value)


# --- non-finite scores ---------------------------------------------------------------------------------

CASE = st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2), st.integers(1, 6), st.integers(1, 12),
                 st.sampled_from(["buckets", "band"]), st.booleans(), st.booleans())


@settings(max_examples=120, deadline=None)
@given(CASE)
def test_step_equals_reference_on_non_finite_scores(built, case):
    """Scores holding NaN, +-inf and values whose sum overflows float32, node ids that are leaves, past
    the trie or negative: the CPU step equals the reference (NaN as -inf, +inf first, ties by row then
    token), with either selection, GTM on or off, counting on or off."""
    idx, reqs = built
    seed, depth, per_req, k, selection, gtm, count = case
    rng = np.random.default_rng(seed)
    m = Matcher(idx, cpu_selection=selection)
    B = len(reqs)
    lo, hi = idx.level_offsets[depth], idx.level_offsets[depth + 1]
    nodes = rng.integers(lo, hi, size=B * per_req)
    dead = rng.random(len(nodes)) < 0.25
    nodes[dead] = rng.choice([-1, -2**40, idx.first_leaf, idx.num_nodes - 1, idx.num_nodes, 10**12], dead.sum())
    rr = np.repeat(np.arange(B), per_req)
    lp = np.round(rng.normal(size=(len(nodes), idx.vocab_size)), 1).astype(np.float32)
    odd = rng.random(lp.shape) < 0.3
    lp[odd] = rng.choice(WEIRD, odd.sum())
    bs = np.where(rng.random(len(nodes)) < 0.3, rng.choice(WEIRD, len(nodes)),
                  np.round(rng.normal(size=len(nodes)), 1)).astype(np.float32)
    st_ = m.step(nodes, lp, bs, rr, reqs, k, gtm=gtm, count_candidates=count)
    ref = step_reference(idx, nodes, lp, bs, rr, reqs, k, gtm)
    for b, (par, tok, kid, sc, n) in enumerate(ref):
        assert st_.parent_rows[b].tolist() == par + [-1] * (k - len(par))
        assert st_.tokens[b].tolist() == tok + [-1] * (k - len(tok))
        assert st_.nodes[b].tolist() == kid + [-1] * (k - len(kid))
        assert np.array_equal(st_.scores[b], np.array(sc + [-np.inf] * (k - len(sc)), np.float32))
        assert st_.num_candidates[b] == (n if count or not gtm else -1)


def test_band_and_buckets_agree_on_large_requests_with_infinities(built):
    """Enough candidates for the band to compact its buffer, with many +inf ties: same answer as buckets."""
    idx, reqs = built
    band, buckets = Matcher(idx, cpu_selection="band"), Matcher(idx, cpu_selection="buckets")
    rng = np.random.default_rng(4)
    lo, hi = idx.level_offsets[1], idx.level_offsets[2]
    nodes = np.tile(np.arange(lo, hi), 200)
    rr = np.zeros(len(nodes), np.int64)
    lp = rng.choice(WEIRD, size=(len(nodes), idx.vocab_size))
    bs = rng.choice(WEIRD, size=len(nodes))
    for k in (1, 5, 700):
        for gtm in (True, False):
            a = band.step(nodes, lp, bs, rr, reqs[:1], k, gtm=gtm)
            b = buckets.step(nodes, lp, bs, rr, reqs[:1], k, gtm=gtm)
            for name, x, y in zip(a._fields, a, b):
                assert np.array_equal(x, y), (k, gtm, name)
            assert (a.scores[0][:2] == np.inf).all()


CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import gtmkit
    from gtmkit.matcher.arrays import RequestBatch
    from gtmkit.matcher.matcher import Matcher
    idx = gtmkit.load_index(sys.argv[1])
    m = Matcher(idx)
    req = [idx.encode_request({})]
    toks = idx.children(0)[0].tolist()
    out = {"root_tokens": toks}
    for i in range(40):  # a +inf log-prob used to corrupt the heap within a few steps
        lp = np.full((1, idx.vocab_size), -1.0, np.float32)
        lp[0, toks[i % len(toks)]] = np.inf
        st = m.step([0], lp, [0.0], [0], req, 4, gtm=False)
    out["inf"] = [st.tokens[0].tolist(), st.scores[0].tolist()]
    lp = np.full((1, idx.vocab_size), 3e38, np.float32)  # beam score + log-prob overflows to +inf
    st = m.step([0], lp, [3e38], [0], req, 4, gtm=False)
    out["overflow"] = st.scores[0].tolist()
    m = Matcher(idx, cpu_selection="band")
    st = m.step([0], lp, [3e38], [0], req, 4, gtm=False)
    out["overflow_band"] = st.scores[0].tolist()
    out["postfilter"] = [a.tolist() for a, _ in m.postfilter(np.array([[10**9]]), req)]
    def err(fn):
        try:
            fn()
            return "no error"
        except gtmkit.GtmkitError as e:
            return type(e).__name__
    out["eligible_rows"] = err(lambda: idx.eligible_rows(np.array([10**9]), req[0]))
    q = m.batch(req)
    bad = RequestBatch(q.bitmask, q.sig_off + 10**6, q.sigs, q.code_off, q.codes)
    out["batch"] = err(lambda: m.step([0], lp, [0.0], [0], bad, 4))
    print(json.dumps(out))
""")


@pytest.mark.slow  # a child process that may crash
def test_former_crashes_in_a_child_process(built):
    """The reproducers that killed the process: each answered (or refused) in a child that exits cleanly."""
    idx, _ = built
    env = dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", CHILD, str(idx.path)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    root = out["root_tokens"]
    toks, scores = out["inf"]
    rest = [t for t in root if t != root[39 % len(root)]][:3]
    assert toks == ([root[39 % len(root)]] + rest + [-1] * 4)[:4]
    assert scores == ([np.inf] + [-1.0] * len(rest) + [-np.inf] * 4)[:4]
    n = min(4, len(root))
    assert out["overflow"] == out["overflow_band"] == [np.inf] * n + [-np.inf] * (4 - n)
    assert out["postfilter"] == [[]]
    assert out["eligible_rows"] == out["batch"] == "RequestError"


# --- caller ids and arguments ------------------------------------------------------------------------


def test_node_id_forms(built):
    """uint64 ids past int64, int64 min, leaves, ids past the trie: dead rows; floats, bools, Python ints
    beyond 64 bits: refused with the argument's name."""
    idx, reqs = built
    m = Matcher(idx)
    lp = np.zeros((1, idx.vocab_size), np.float32)
    for nid in (np.array([2**64 - 1], np.uint64), np.array([np.iinfo(np.int64).min]), [idx.first_leaf],
                [idx.num_nodes], [10**15]):
        st_ = m.step(nid, lp, [0.0], [0], reqs[:1], 3, gtm=False)
        assert (st_.parent_rows == -1).all() and (st_.num_candidates == 0).all()
        assert not m.mask(nid, [0], reqs[:1]).any()
    for nid in ([0.0], [True], [2**64], ["0"], [[0]]):
        assert "node_ids" in one_line_error(lambda: m.step(nid, lp, [0.0], [0], reqs[:1], 3))
        assert "node_ids" in one_line_error(lambda: m.mask(nid, [0], reqs[:1]))
    assert "row_request" in one_line_error(lambda: m.step([0], lp, [0.0], [0.5], reqs[:1], 3))
    # uint64 ids equal to int64 ids where they fit
    a = m.step(np.array([0], np.uint64), lp, [0.0], np.array([0], np.uint8), reqs[:1], 3)
    b = m.step([0], lp, [0.0], [0], reqs[:1], 3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_step_argument_errors(built):
    idx, reqs = built
    m = Matcher(idx)
    lp = np.zeros((1, idx.vocab_size), np.float32)
    ok = dict(node_ids=[0], logprobs=lp, beam_scores=[0.0], row_request=[0], requests=reqs[:1], k=3)
    bad = {"k": [2.5, True, 0, -1, "3", None], "gtm": [1, "yes", None], "count_candidates": [0, "no"],
           "logprobs": [lp.astype(bool), lp.astype(complex), lp[0], "x"], "beam_scores": [[True], [[0.0]], ["a"]],
           "requests": [[], [{"country": "US"}], 5, [None]]}
    for name, values in bad.items():
        for v in values:
            kw = dict(ok, **{name: v})
            msg = one_line_error(lambda: m.step(**kw))
            assert name.rstrip("s") in msg or "request" in msg, (name, v, msg)
    # integer log-probs and float64 beyond float32 are converted (the latter to +inf)
    st_ = m.step([0], lp.astype(np.int64), np.array([1e300]), [0], reqs[:1], 3, gtm=False)
    assert (st_.scores[0] == np.inf).all()
    msg = one_line_error(lambda: m.step(**dict(ok, requests=reqs * 16, row_request=[0], k=10**9)))
    assert "GiB" in msg and "k=1000000000" in msg
    assert np.int64(3) == m.step(**dict(ok, k=np.int64(3))).tokens.shape[1]


def test_beam_search_argument_errors(built):
    idx, reqs = built
    m = Matcher(idx)

    def logits(step, prev, parents):
        return np.zeros((len(prev), idx.vocab_size), np.float32)

    for sizes in [(1, 2.5, 2), (1, True, 2), (1, "2", 2), (1, 0, 2), 3, (1, 2)]:
        assert "beam_sizes" in one_line_error(lambda: gtmkit.beam_search(m, reqs, logits, sizes))
    for kw in [dict(gtm=1), dict(postfilter="no"), dict(count_candidates=None)]:
        one_line_error(lambda: gtmkit.beam_search(m, reqs, logits, (1, 2, 2), **kw))
    one_line_error(lambda: gtmkit.beam_search(m, reqs, None, (1, 2, 2)))
    assert "GiB" in one_line_error(lambda: gtmkit.beam_search(m, reqs * 8, logits, (1, 10**9, 2)))
    res = gtmkit.beam_search(m, reqs, logits, (np.int32(1), np.int64(2), 2))
    assert res.sids.shape == (len(reqs), 2, idx.sid_length)


def test_postfilter_skips_ids_that_are_not_leaves(built):
    """Ids outside [first_leaf, num_nodes) read like the -1 padding, documented as such."""
    idx, reqs = built
    m = Matcher(idx)
    rng = np.random.default_rng(2)
    leaves = rng.integers(idx.first_leaf, idx.num_nodes, size=(len(reqs), 6))
    junk = leaves.copy()
    odd = rng.random(leaves.shape) < 0.5
    junk[odd] = rng.choice([-1, -7, 0, idx.first_leaf - 1, idx.num_nodes, 10**9, 2**62], odd.sum())
    padded = np.where(odd, -1, leaves)
    for exact in (True, False):
        got, want = m.postfilter(junk, reqs, exact), m.postfilter(padded, reqs, exact)
        assert all(np.array_equal(a, c) and np.array_equal(b, d) for (a, b), (c, d) in zip(got, want))
    big = np.where(odd, np.uint64(2**64 - 1), leaves.astype(np.uint64))
    assert [a.tolist() for a, _ in m.postfilter(big, reqs)] == [a.tolist() for a, _ in m.postfilter(padded, reqs)]
    for bad in (leaves.astype(float), leaves[0], [[2**64]]):
        assert "leaf_nodes" in one_line_error(lambda: m.postfilter(bad, reqs))
    one_line_error(lambda: m.postfilter(leaves, reqs, exact=1))


# --- requests and batches ----------------------------------------------------------------------------


def test_hand_made_batches_are_checked(built):
    idx, reqs = built
    m = Matcher(idx)
    q = m.batch(reqs)
    lp = np.zeros((len(reqs), idx.vocab_size), np.float32)
    args = (np.zeros(len(reqs), np.int64), lp, np.zeros(len(reqs)), np.arange(len(reqs)))
    same = m.step(*args, RequestBatch(*q), 4)  # a consistent hand-made batch: the same answer
    assert all(np.array_equal(x, y) for x, y in zip(same, m.step(*args, q, 4)))
    n_sigs, n_codes = len(q.sigs), len(q.codes)
    off_back = q.sig_off.copy()
    off_back[0, 1], off_back[0, 0] = 1, 2
    broken = [q._replace(sig_off=q.sig_off + n_sigs + 1), q._replace(sig_off=q.sig_off - 1),
              q._replace(sig_off=off_back), q._replace(code_off=q.code_off + n_codes + 1),
              q._replace(sig_off=q.sig_off[:, :-1].copy()), q._replace(bitmask=q.bitmask[:, :, :-1].copy()),
              q._replace(bitmask=q.bitmask.astype(np.int64)), q._replace(sigs=q.sigs[:, :0].copy()),
              q._replace(codes=q.codes.astype(np.float64)), q._replace(sig_off=q.sig_off.tolist()),
              q._replace(bitmask=q.bitmask[:0].copy()), q._replace(sigs=np.asfortranarray(np.tile(q.sigs, 2)))]
    for bq in broken:
        assert "RequestBatch" in one_line_error(lambda: m.step(*args, RequestBatch(*bq), 4), RequestError)
        one_line_error(lambda: m.postfilter(np.full((len(reqs), 1), -1), RequestBatch(*bq)), RequestError)
        one_line_error(lambda: m.mask([0], [0], RequestBatch(*bq)), RequestError)


def test_hand_made_requests_are_checked(built):
    idx, reqs = built
    m = Matcher(idx)
    r = reqs[0]
    assert idx.node_passes(1, r._replace(bitmask=r.bitmask.astype(np.int64))) == idx.node_passes(1, r)
    sig = r.bloom_sigs[0]
    broken = [r._replace(bitmask=r.bitmask[:, :-1]), r._replace(bitmask=r.bitmask.astype(float)),
              r._replace(bitmask=r.bitmask[0]), r._replace(bloom_sigs=r.bloom_sigs[:-1]),
              r._replace(bloom_sigs=(np.tile(sig, 2),) + r.bloom_sigs[1:]),
              r._replace(bloom_sigs=(sig.astype(float),) + r.bloom_sigs[1:]),
              r._replace(bloom_sigs=(sig[0],) + r.bloom_sigs[1:]),
              r._replace(bloom_codes=(np.array(["a"]),) + r.bloom_codes[1:]),
              r._replace(bloom_codes=(np.zeros((1, 1), np.int64),) + r.bloom_codes[1:]),
              r._replace(bloom_codes=None), Request(None, (), ()), (r.bitmask, r.bloom_sigs, r.bloom_codes)]
    assert idx.bloom, "the test index needs a Bloom matcher"
    for br in broken:
        one_line_error(lambda: m.batch([reqs[1], br]), RequestError)
        one_line_error(lambda: idx.eligible_rows([0], br), RequestError)
        one_line_error(lambda: idx.node_passes(1, br), RequestError)


# --- Index methods -----------------------------------------------------------------------------------


def test_index_ids(built):
    idx, reqs = built
    r = reqs[0]
    assert "ad row 1000000000" in one_line_error(lambda: idx.eligible_rows(np.array([0, 10**9]), r), RequestError)
    assert "ad row -1" in one_line_error(lambda: idx.eligible_rows([-1], r), RequestError)
    one_line_error(lambda: idx.eligible_rows([idx.num_ads], r), RequestError)
    one_line_error(lambda: idx.eligible_rows([0.5], r), RequestError)
    assert len(idx.eligible_rows(np.arange(idx.num_ads), r)) == idx.num_ads
    for bad in ([2**70], [2**64 - 1], np.array([2**63], np.uint64), [1.5], ["x"], [True], [None]):
        one_line_error(lambda: idx.ad_eligible(bad, r), RequestError)
    assert len(idx.ad_eligible([], r)) == 0
    ids = idx.sid_ads(idx.first_leaf)
    assert np.array_equal(idx.ad_eligible(np.array(ids, dtype=object), r), idx.ad_eligible(ids, r))
    assert idx.node_passes(-1, r) is False
    for bad in (-2, idx.num_nodes, 2**64, 1.0, True, "1"):
        one_line_error(lambda: idx.node_passes(bad, r))
