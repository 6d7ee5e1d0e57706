"""CPU matcher: step, mask and postfilter equal plain-Python references on random small indexes."""

from __future__ import annotations

import numpy as np
import pytest

import gtmkit
from gtmkit.matcher.matcher import Matcher
from gtmkit.testing.gtm import catalog_rows, eligible, mask_reference, step_reference

from support.catalogs import random_user
from support.indexes import MODES, _build


@pytest.fixture(autouse=True, params=["buckets", "band"])
def selection(request, monkeypatch):
    """Every test runs with both top-k selections of the CPU step (cpu.select._select_request)."""
    import gtmkit.matcher.cpu.select as S
    monkeypatch.setattr(S, "BAND_FROM", 0 if request.param == "band" else 1 << 62)
    return request.param


def _rows_for(idx, rng, B, per_req, depth):
    """Random live rows at one depth, some dead (-1), rows of a request contiguous."""
    lo, hi = idx.level_offsets[depth], idx.level_offsets[depth + 1]
    nodes = rng.integers(lo, hi, size=B * per_req)
    nodes[rng.random(len(nodes)) < 0.2] = -1
    return nodes.astype(np.int32), np.repeat(np.arange(B), per_req).astype(np.int32)


@pytest.mark.parametrize("mode,kw", MODES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_step_and_mask_equal_reference(tmp_path, mode, kw, seed):
    idx, _, _ = _build(tmp_path, seed + 10, mode, kw, n_ads=120, L=3, V=6)
    m = Matcher(idx)
    rng = np.random.default_rng(seed)
    B = 3
    reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
    for depth in range(idx.sid_length):
        for per_req, k in [(4, 3), (5, 40), (1, 1)]:
            nodes, rr = _rows_for(idx, rng, B, per_req, depth)
            # coarse values make ties common; one NaN and one -inf exercise the ordering rules
            lp = np.round(rng.normal(size=(len(nodes), idx.vocab_size)), 1).astype(np.float32)
            lp.flat[rng.integers(lp.size)] = np.nan
            lp.flat[rng.integers(lp.size)] = -np.inf
            bs = np.round(rng.normal(size=len(nodes)), 1).astype(np.float32)
            for gtm in (True, False):
                st = m.step(nodes, lp, bs, rr, reqs, k, gtm=gtm, count_candidates=True)
                ref = step_reference(idx, nodes, lp, bs, rr, reqs, k, gtm)
                for b, (par, tok, kid, sc, n) in enumerate(ref):
                    got = st.parent_rows[b]
                    assert list(got[:len(par)]) == par and np.all(got[len(par):] == -1)
                    assert list(st.tokens[b][:len(tok)]) == tok and list(st.nodes[b][:len(kid)]) == kid
                    assert np.array_equal(st.scores[b][:len(sc)], np.array(sc, np.float32))
                    assert np.all(st.scores[b][len(sc):] == -np.inf)
                    assert st.num_candidates[b] == n
                mk = m.mask(nodes, rr, reqs, gtm=gtm)
                assert np.array_equal(mk, mask_reference(idx, nodes, rr, reqs, gtm))


@pytest.mark.parametrize("mode,kw", MODES)
def test_postfilter_equals_brute_force(tmp_path, mode, kw):
    idx, table, schema = _build(tmp_path, 31, mode, kw, n_ads=150, L=3, V=5)
    rows = catalog_rows(table, schema)
    m = Matcher(idx)
    rng = np.random.default_rng(5)
    users = [random_user(rng) for _ in range(4)]
    reqs = [idx.encode_request(u) for u in users]
    leaves = np.full((4, 9), -1, np.int64)
    for b in range(4):
        pick = rng.choice(np.arange(idx.first_leaf, idx.num_nodes), size=min(7, idx.num_sids), replace=False)
        leaves[b, :len(pick)] = pick
    out = m.postfilter(leaves, reqs)
    by_id = {ad["ad_id"]: ad for ad in rows}
    for b, (ads, rank) in enumerate(out):
        want = [(ad_id, m_) for m_, n in enumerate(leaves[b]) if n >= 0
                for ad_id in sorted(idx.sid_ads(int(n))) if eligible(by_id[ad_id], users[b], schema)]
        assert list(zip(ads.tolist(), rank.tolist())) == want
    # without the exact filter every ad of every SID comes back
    raw = m.postfilter(leaves, reqs, exact=False)
    assert all(len(a) == sum(len(idx.sid_ads(int(n))) for n in leaves[b] if n >= 0) for b, (a, _) in enumerate(raw))


def test_step_input_errors(tmp_path):
    idx, _, _ = _build(tmp_path, 40, "none", {})
    m = Matcher(idx)
    req = [idx.encode_request({})]
    with pytest.raises(gtmkit.GtmkitError, match="expected logprobs"):
        m.step([0], np.zeros((1, 3), np.float32), [0.0], [0], req, 2)
    with pytest.raises(gtmkit.GtmkitError, match="non-decreasing"):
        m.step([0, 0], np.zeros((2, idx.vocab_size), np.float32), [0.0, 0.0], [1, 0], req * 2, 2)
    with pytest.raises(gtmkit.GtmkitError, match="device"):
        Matcher(idx, device="tpu")


def _random_logits(V, seed):
    rng = np.random.default_rng(seed)

    def fn(step, prev_tokens, parent_rows):
        assert prev_tokens.shape == parent_rows.shape
        x = rng.normal(size=(len(prev_tokens), V)).astype(np.float32)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))

    return fn


@pytest.mark.parametrize("mode,kw", MODES)
def test_wide_beam_search_returns_every_valid_sid(tmp_path, mode, kw):
    idx, table, schema = _build(tmp_path, 50, mode, kw, n_ads=150, L=3, V=6)
    rows = catalog_rows(table, schema)
    m = Matcher(idx)
    rng = np.random.default_rng(3)
    users = [random_user(rng) for _ in range(5)]
    reqs = [idx.encode_request(u) for u in users]
    wide = (1,) + (idx.num_sids,) * (idx.sid_length - 1)
    cd = gtmkit.beam_search(m, reqs, _random_logits(idx.vocab_size, 1), wide, gtm=False)
    catalog_sids = {ad["sid"] for ad in rows}
    for b in range(len(reqs)):
        got = [tuple(s) for s, n in zip(cd.sids[b], cd.leaf_nodes[b]) if n >= 0]
        assert len(got) == len(set(got)) and set(got) == catalog_sids
        assert all(idx.leaf_sid(int(n)) == s for s, n in zip(got, cd.leaf_nodes[b][:len(got)]))
        assert np.all(np.diff(cd.scores[b][:len(got)]) <= 0)
    res = gtmkit.beam_search(m, reqs, _random_logits(idx.vocab_size, 2), wide, gtm=True, count_candidates=True)
    for b, user in enumerate(users):
        got = {tuple(s) for s, n in zip(res.sids[b], res.leaf_nodes[b]) if n >= 0}
        holding = {ad["sid"] for ad in rows if eligible(ad, user, schema)}
        assert holding <= got
        for n in res.leaf_nodes[b][res.leaf_nodes[b] >= 0]:
            node = int(n)
            while node > 0:
                assert idx.node_passes(node, reqs[b])
                node = idx.parent(node)
        ads, _ = res.ads[b]
        assert set(ads.tolist()) == {ad["ad_id"] for ad in rows if eligible(ad, user, schema)}
    assert np.all(res.candidates[0] == res.beams[0])


def test_beam_search_narrow_and_errors(tmp_path):
    idx, _, _ = _build(tmp_path, 51, "static", {"k": [2, 2, 2]}, n_ads=150, L=3, V=6)
    m = Matcher(idx)
    reqs = [idx.encode_request({"country": "US"}), idx.encode_request({})]
    res = gtmkit.beam_search(m, reqs, _random_logits(idx.vocab_size, 4), (1, 2, 3))
    assert res.sids.shape == (2, 3, 3) and res.scores.shape == (2, 3) and np.all(res.beams <= [[2], [3], [3]])
    # a start beam wider than one row holds copies of the start: the same search, as generate(num_beams=M) runs it
    wide = gtmkit.beam_search(m, reqs, _random_logits(idx.vocab_size, 5), (2, 2, 2))
    narrow = gtmkit.beam_search(m, reqs, _random_logits(idx.vocab_size, 5), (1, 2, 2))
    assert np.array_equal(wide.sids, narrow.sids) and np.array_equal(wide.scores, narrow.scores)
    for bad in ((1, 2), (1, 0, 2), (1, 2.5, 2)):
        with pytest.raises(gtmkit.GtmkitError, match="beam_sizes"):
            gtmkit.beam_search(m, reqs, _random_logits(idx.vocab_size, 4), bad)


def test_signed_zero_scores_tie(tmp_path):
    """-0.0 and +0.0 are the same score: the tie goes to the lower row, then the lower token."""
    idx, _, _ = _build(tmp_path, 60, "none", {}, n_ads=80, L=2, V=4)
    m = Matcher(idx)
    req = [idx.encode_request({})]
    nodes = np.array([0, 0], np.int32)
    lp = np.zeros((2, idx.vocab_size), np.float32)
    lp[0] = -0.0                      # row 0 scores -0.0 + -0.0 = -0.0, row 1 scores +0.0
    bs = np.array([-0.0, 0.0], np.float32)
    st = m.step(nodes, lp, bs, [0, 0], req, 4, gtm=False)
    ref = step_reference(idx, nodes, lp, bs, [0, 0], req, 4, gtm=False)[0]
    assert list(st.parent_rows[0][:len(ref[0])]) == ref[0] and list(st.tokens[0][:len(ref[1])]) == ref[1]


def test_many_equal_scores(tmp_path):
    """Every candidate ties: order falls back to (row, token) and the crowded bucket is sorted fully."""
    idx, _, _ = _build(tmp_path, 61, "none", {}, n_ads=300, L=2, V=8)
    m = Matcher(idx)
    req = [idx.encode_request({})]
    lo, hi = idx.level_offsets[1], idx.level_offsets[2]
    nodes = np.arange(lo, hi, dtype=np.int32)
    lp = np.full((len(nodes), idx.vocab_size), -1.0, np.float32)
    bs = np.zeros(len(nodes), np.float32)
    rr = np.zeros(len(nodes), np.int32)
    st = m.step(nodes, lp, bs, rr, req, 50, gtm=False)
    ref = step_reference(idx, nodes, lp, bs, rr, req, 50, gtm=False)[0]
    assert list(st.parent_rows[0][:len(ref[0])]) == ref[0] and list(st.tokens[0][:len(ref[1])]) == ref[1]
    assert len(ref[0]) > 32


@pytest.fixture(scope="module")
def large_index(tmp_path_factory):
    """20,000 ads: thousands of candidates a request. Built once; every test here only reads it."""
    idx, _, _ = _build(tmp_path_factory.mktemp("large"), 74, "dynamic", {"target_fill": 0.4, "k_max": 3},
                       n_ads=20000, L=3, V=48)
    return idx


class TestBandSelection:
    """Each test compares a band-selection matcher with a bucket-selection one, set on the matchers themselves:
    they run once, not once for each module-wide selection."""

    @pytest.fixture(autouse=True)
    def selection(self):
        return None

    @pytest.mark.parametrize("scores", ["rounded", "ties", "wide"])
    def test_band_selection_on_large_requests(self, large_index, scores):
        _band_selection_on_large_requests(large_index, scores)

    def test_band_selection_keeps_every_tie_at_its_threshold(self, large_index):
        _band_selection_keeps_every_tie_at_its_threshold(large_index)


def _band_selection_on_large_requests(idx, scores):
    """Thousands of candidates per request, so the band selection compacts its buffer, and GTM pass
    rates and rate hints that force a second band: same answer as the bucket selection (itself
    checked against the reference above) and, on a sample, as the reference."""
    band, buckets = Matcher(idx, cpu_selection="band"), Matcher(idx, cpu_selection="buckets")
    rng = np.random.default_rng(9)
    B = 3
    reqs = [idx.encode_request(random_user(rng)) for _ in range(B)]
    for depth in (1, 2):
        nodes, rr = _rows_for(idx, rng, B, 500, depth)
        lp = np.round(rng.normal(size=(len(nodes), idx.vocab_size)), 1).astype(np.float32)
        bs = np.round(rng.normal(size=len(nodes)), 1).astype(np.float32)
        if scores == "ties":
            lp[:] = -1.0
            bs[:] = 0.0
        elif scores == "wide":
            lp *= 40
        for k in (1, 7, 300):
            for hint in (1.0, 1e-3, 1.0 / 3.0):
                band._gtm_rate[:] = hint
                for gtm in (True, False):
                    a = band.step(nodes, lp, bs, rr, reqs, k, gtm=gtm)
                    b = buckets.step(nodes, lp, bs, rr, reqs, k, gtm=gtm)
                    for name, x, y in zip(a._fields, a, b):
                        assert np.array_equal(x, y), (depth, k, hint, gtm, name)
        ref = step_reference(idx, nodes, lp, bs, rr, reqs, 7, True)
        st = band.step(nodes, lp, bs, rr, reqs, 7, gtm=True)
        for b_, (par, tok, kid, sc, n) in enumerate(ref):
            assert list(st.parent_rows[b_][:len(par)]) == par and list(st.tokens[b_][:len(tok)]) == tok


def _band_selection_keeps_every_tie_at_its_threshold(idx):
    """Regression: when more scores than the band's buffer tie at its threshold, the buffer grows. It used
    to drop later candidates instead, a better one arriving after the ties among them, and ties that a
    second band (strictly below the threshold) never revisits."""
    band, buckets = Matcher(idx, cpu_selection="band"), Matcher(idx, cpu_selection="buckets")
    rng = np.random.default_rng(10)
    reqs = [idx.encode_request(random_user(rng)) for _ in range(2)]
    nodes, rr = _rows_for(idx, rng, 2, 500, 1)
    lp = np.full((len(nodes), idx.vocab_size), -1.0, np.float32)
    bs = np.zeros(len(nodes), np.float32)
    last = np.nonzero((nodes >= 0) & (rr == 0))[0][-1]
    lp[last, :] = 0.0  # request 0's best candidates come after thousands of ties
    for k in (1, 3, 40):
        for hint in (1.0, 1e-3):
            band._gtm_rate[:] = hint
            for gtm in (True, False):
                a = band.step(nodes, lp, bs, rr, reqs, k, gtm=gtm)
                b = buckets.step(nodes, lp, bs, rr, reqs, k, gtm=gtm)
                for name, x, y in zip(a._fields, a, b):
                    assert np.array_equal(x, y), (k, hint, gtm, name)
    st = band.step(nodes, lp, bs, rr, reqs, 3, gtm=False)
    assert list(st.parent_rows[0]) == [last] * 3 and st.scores[0, 0] == 0.0


def test_request_starts_equals_searchsorted():
    """The numba row-offset helper of Matcher.step: same offsets as np.searchsorted, and it refuses
    decreasing or out-of-range request numbers."""
    from gtmkit.matcher.cpu.step import request_starts

    rng = np.random.default_rng(0)
    for trial in range(500):
        B, R = int(rng.integers(1, 6)), int(rng.integers(0, 12))
        rr = np.sort(rng.integers(0, B, R)).astype(np.int64)
        if trial % 5 == 0 and R > 1:
            rr[rng.integers(R)] = rng.integers(-1, B + 2)
        starts = np.empty(B + 1, np.int64)
        ok = request_starts(rr, starts)
        assert ok == (R == 0 or (np.all(np.diff(rr) >= 0) and rr[0] >= 0 and rr[-1] < B))
        if ok:
            assert np.array_equal(starts, np.searchsorted(rr, np.arange(B + 1)))
