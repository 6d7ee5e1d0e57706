"""Requests follow the index they are used with (docs/design.md §9): a request encoded before a swap to a rebuild
(new domain values, moved targeting, new strings), an in-place update (new strings, new ads) or a shard rebuild (new
SIDs) answers as one encoded against the index serving the call. Every answer is checked by brute force over the
catalog the matcher serves."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import gtmkit
from gtmkit.errors import GtmkitError, RequestError
from gtmkit.formats.schema import parse_schema
from gtmkit.matcher.beam import beam_search
from gtmkit.matcher.served import Matcher
from gtmkit.targeting.semantics import Request
from gtmkit.testing.gtm import catalog_rows, eligible

from support.catalogs import COUNTRIES, LOCATIONS, random_catalog, random_user, schema_dict, write
from support.pause_cases import changes_for

L, V = 3, 5
NEW_COUNTRIES = ["BR", "IN", "MX"]
NEW_LOCATIONS = ["IT:RM", "IT:MI", "BR:SP"]


def _schema():
    sd = schema_dict(L=L, V=V, domain=False)  # bitmask domains follow the catalog: a rebuild may grow them
    return sd, parse_schema(sd)


def _user(rng) -> dict:
    u = random_user(rng)
    if rng.random() < 0.4:
        u["country"] = str(rng.choice(COUNTRIES + NEW_COUNTRIES))
    if rng.random() < 0.5:
        u["location"] = [str(x) for x in rng.choice(LOCATIONS + NEW_LOCATIONS, 2, replace=False)]
    return u


def _retarget(table: pa.Table, seed: int, share: float) -> pa.Table:
    """Some ads' targeting drawn again, now and then with a country or location the catalog lacked."""
    rng = np.random.default_rng(seed)
    d = table.to_pydict()
    for i in range(table.num_rows):
        if rng.random() < share:
            d["country"][i] = [str(rng.choice(COUNTRIES + NEW_COUNTRIES))] if rng.random() < 0.7 else None
            d["location"][i] = [str(x) for x in rng.choice(LOCATIONS + NEW_LOCATIONS, 2, replace=False)] \
                if rng.random() < 0.7 else []
    return pa.table(d, schema=table.schema)


def _table(rows) -> pa.Table:
    """catalog_rows back to a catalog table (allowed lists sorted; an untargeted attribute null)."""
    t = random_catalog(0, n_ads=1)
    d = {"ad_id": [ad["ad_id"] for ad in rows], "sid": [list(ad["sid"]) for ad in rows]}
    for name, excl in (("country", True), ("age", False), ("gender", False), ("location", True)):
        d[name] = [sorted(ad[name][0]) or None for ad in rows]
        if excl:
            d[name + "_exclude"] = [sorted(ad[name][1]) for ad in rows]
    return pa.table(d, schema=t.schema)


def _logits(seed):
    rng = np.random.default_rng(seed)
    return lambda step, prev, parents: np.log(rng.random((len(prev), V)) + 1e-3).astype(np.float32)


def serves_old_requests(m, rows, schema, held) -> None:
    """Requests encoded against any earlier index: the post-filter of every leaf, a beam search wide enough to keep
    every SID, the exact test and the GTM test of the index serving now give the brute-force answer."""
    users = [u for u, _ in held]
    reqs = [r for _, r in held]
    cur = m.current()
    idx = cur.index
    want = [sorted((idx.find(ad["sid"]) - idx.first_leaf, ad["ad_id"]) for ad in rows if eligible(ad, u, schema))
            for u in users]
    leaves = np.tile(np.arange(idx.first_leaf, idx.num_nodes), (len(reqs), 1))
    for b, (ads, rank) in enumerate(cur.postfilter(leaves, reqs)):
        assert list(zip(rank.tolist(), ads.tolist())) == want[b]
    res = beam_search(cur, reqs, _logits(len(rows)), (1, V, V * V))  # nothing cut: every passing SID kept
    assert res.version == idx.version
    for b, (ads, _) in enumerate(res.ads):
        assert sorted(ads.tolist()) == sorted(a for _, a in want[b])
    ids = np.array([ad["ad_id"] for ad in rows], np.int64)
    for b, r in enumerate(reqs):
        ok = idx.ad_eligible(ids, r)
        assert ok.tolist() == [eligible(ad, users[b], schema) for ad in rows]
        for _, ad_id in want[b]:
            node = 0
            for tok in next(ad["sid"] for ad in rows if ad["ad_id"] == ad_id):
                node = idx.child(node, tok)
                assert idx.node_passes(node, r)


class StaleRequests(RuleBasedStateMachine):
    """Encode requests, then swap, update and rebuild in any order, then search with every request ever encoded."""

    device = "cpu"

    @initialize(seed=st.integers(0, 2**16))
    def start(self, seed):
        self.dir = Path(tempfile.mkdtemp(prefix="gtmkit-stale-"))
        self.sd, self.schema = _schema()
        table = random_catalog(seed, n_ads=50, L=L, V=V, n_sids=18)
        self.n = 0
        self.m = Matcher(self._build(table), self.device)
        self.rows = catalog_rows(table, self.schema)
        self.held = []

    def _build(self, table):
        self.n += 1
        src = self.dir / f"v{self.n}"
        src.mkdir()
        return gtmkit.build_index(write(src, table, self.sd), src / "idx")

    def teardown(self):
        shutil.rmtree(getattr(self, "dir", "/nonexistent"), ignore_errors=True)

    @rule(seed=st.integers(0, 2**16), n=st.integers(1, 3))
    def encode(self, seed, n):
        rng = np.random.default_rng(seed)
        for _ in range(n):
            u = _user(rng)
            self.held.append((u, self.m.encode_request(u)))

    @rule(seed=st.integers(0, 2**16), share=st.sampled_from([0.1, 0.6]))
    def swap_to_rebuild(self, seed, share):
        table = _retarget(_table(self.rows), seed, share)
        self.m.swap(self._build(table))
        self.rows = catalog_rows(table, self.schema)

    @rule(seed=st.integers(0, 2**16), strings=st.booleans())
    def update(self, seed, strings):
        def extend(t):
            if not strings:
                return t
            d = t.to_pydict()
            d["location"] = [[NEW_LOCATIONS[i % 3]] if i % 2 else v for i, v in enumerate(d["location"])]
            return pa.table(d, schema=t.schema)
        changes, rows, _ = changes_for(self.rows, self.schema, seed, 4, 4, 0, L=L, V=V, extend=extend)
        before = self.m.version
        try:
            self.m.update_ads(changes)
        except GtmkitError as e:  # a country this index's domain lacks: refused whole, nothing changed
            assert "domain" in str(e) and self.m.version == before
            return
        self.rows = rows

    @rule(seed=st.integers(0, 2**16))
    def rebuild_shards(self, seed):
        changes, rows, new_sids = changes_for(self.rows, self.schema, seed, 2, 2, 3, L=L, V=V)
        if not new_sids:
            return
        cur = self.m.current()
        if cur.index.version.count("+"):  # an in-memory update has no artifact version to rebuild from
            return
        try:
            new, _ = gtmkit.rebuild_shards(cur.index, changes)
        except GtmkitError as e:
            assert "domain" in str(e)
            return
        self.m.swap(new)
        self.rows = [ad for ad in rows] + [ad for ad in catalog_rows(changes, self.schema)
                                          if ad["ad_id"] in set(new_sids)]

    @invariant()
    def answers_are_the_served_catalogs(self):
        if getattr(self, "held", None):
            serves_old_requests(self.m, self.rows, self.schema, self.held)


StaleRequests.TestCase.settings = settings(max_examples=12, stateful_step_count=6, deadline=None,
                                           suppress_health_check=list(HealthCheck))
test_stale_requests_answer_as_fresh_ones = StaleRequests.TestCase


def _two_versions(tmp_path, retarget):
    sd, schema = _schema()
    table = random_catalog(3, n_ads=60, L=L, V=V, n_sids=20)
    new = retarget(table)
    out = []
    for i, t in enumerate((table, new)):
        (tmp_path / str(i)).mkdir()
        out.append(gtmkit.build_index(write(tmp_path / str(i), t, sd), tmp_path / str(i) / "idx"))
    return out, (catalog_rows(table, schema), catalog_rows(new, schema)), schema


def test_a_request_encoded_before_a_swap_to_a_grown_domain(tmp_path):
    def grow(t):
        d = t.to_pydict()
        d["country"] = [["BR"] if i % 5 == 0 else v for i, v in enumerate(d["country"])]
        return pa.table(d, schema=t.schema)
    (a, b), (_, rows_b), schema = _two_versions(tmp_path, grow)
    assert a.layout != b.layout and a.fingerprint != b.fingerprint
    m = Matcher(a)
    rng = np.random.default_rng(4)
    users = [_user(rng) for _ in range(8)] + [{"country": "BR"}, {"country": "US", "location": ["US"]}]
    held = [(u, m.encode_request(u)) for u in users]
    m.swap(b)
    serves_old_requests(m, rows_b, schema, held)


def test_a_request_encoded_before_a_retargeting_rebuild(tmp_path):
    (a, b), (_, rows_b), schema = _two_versions(tmp_path, lambda t: _retarget(t, 9, 0.5))
    m = Matcher(a)
    rng = np.random.default_rng(5)
    held = [(u, m.encode_request(u)) for u in (_user(rng) for _ in range(10))]
    m.swap(b)
    serves_old_requests(m, rows_b, schema, held)


def test_an_update_that_adds_strings_keeps_codes_and_reencodes(tmp_path):
    sd, schema = _schema()
    table = random_catalog(6, n_ads=40, L=L, V=V, n_sids=15)
    idx = gtmkit.build_index(write(tmp_path, table, sd), tmp_path / "idx")
    m = Matcher(idx)
    user = {"location": ["IT:RM", "US"]}
    before = m.encode_request(user)
    assert before.bloom_codes[0][0] == -1  # a string no ad mentions yet
    changes = table.slice(0, 3).to_pydict()
    changes["country"] = [None] * 3
    changes["age"] = [None] * 3
    changes["gender"] = [None] * 3
    changes["country_exclude"] = [[]] * 3
    changes["location"] = [["IT:RM"]] * 3
    changes["location_exclude"] = [[]] * 3
    changes = pa.table(changes, schema=table.schema)
    old_dict = dict(idx.bloom_dictionaries[0])
    m.update_ads(changes)
    new = m.current().index
    assert new.fingerprint != idx.fingerprint
    assert all(new.bloom_dictionaries[0][s] == c for s, c in old_dict.items())  # codes kept, strings appended
    assert new.bloom_dictionaries[0]["IT:RM"] == len(old_dict)
    leaves = np.arange(new.first_leaf, new.num_nodes)[None]
    got = set(m.postfilter(leaves, [before])[0][0].tolist())
    assert set(changes.column("ad_id").to_pylist()) <= got
    assert m.postfilter(leaves, m.batch([before]))[0][0].tolist() == m.postfilter(leaves, [m.encode_request(user)])[0][0].tolist()


def test_a_batch_stacked_before_a_swap_is_stacked_again(tmp_path):
    def grow(t):
        d = t.to_pydict()
        d["location"] = [["IT:RM"] if i % 3 == 0 else v for i, v in enumerate(d["location"])]
        return pa.table(d, schema=t.schema)
    (a, b), (_, rows_b), schema = _two_versions(tmp_path, grow)
    m = Matcher(a)
    users = [{"location": ["IT:RM"]}, {"country": "DE"}]
    q = m.batch([m.encode_request(u) for u in users])
    m.swap(b)
    leaves = np.tile(np.arange(b.first_leaf, b.num_nodes), (2, 1))
    fresh = m.postfilter(leaves, [b.encode_request(u) for u in users])
    for (x, _), (y, _) in zip(m.postfilter(leaves, q), fresh):
        assert x.tolist() == y.tolist()
    assert fresh[0][0].size > 0


def test_requests_with_the_same_fingerprint_are_not_encoded_again(tmp_path):
    (a, b), _, _ = _two_versions(tmp_path, lambda t: t)
    assert a.fingerprint == b.fingerprint  # the same catalog built twice
    r = a.encode_request({"country": "US"})
    assert b.follow(r) is r
    hand = Request(r.bitmask, r.bloom_sigs, r.bloom_codes)  # made by hand: taken as it is
    assert b.follow(hand) is hand
    lost = r._replace(fingerprint="0" * 16, user=None)
    with pytest.raises(RequestError, match="no attributes"):
        Matcher(b).postfilter(np.array([[b.first_leaf]]), [lost])


def test_batches_cannot_be_edited_into_inconsistency(tmp_path):
    (a, _), _, _ = _two_versions(tmp_path, lambda t: t)
    m = Matcher(a)
    q = m.batch([a.encode_request({"country": "US"})])
    with pytest.raises(ValueError):
        q.sig_off[0, 0] = 10**9
    for bad in (q._replace(sig_off=np.array([[0, 10**9]], np.int64)),
                type(q)(q.bitmask, q.sig_off, q.sigs, np.array([[0, 2**62]], np.int64), q.codes)):
        with pytest.raises(RequestError, match="offsets"):
            m.postfilter(np.array([[a.first_leaf]]), bad)
    assert list(itertools.islice(m.postfilter(np.array([[a.first_leaf]]), q), 1))
