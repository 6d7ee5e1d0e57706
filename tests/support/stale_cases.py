"""Stale requests: a state machine that encodes requests, then swaps, updates and rebuilds, and a brute-force check
that requests encoded against any earlier index answer as the index serving the call (shared by the CPU and GPU
tests)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import gtmkit
from gtmkit.errors import GtmkitError
from gtmkit.inputs.schema import parse_schema
from gtmkit.matcher.beam import beam_search
from gtmkit.matcher.matcher import Matcher
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


def _two_versions(tmp_path, retarget):
    sd, schema = _schema()
    table = random_catalog(3, n_ads=60, L=L, V=V, n_sids=20)
    new = retarget(table)
    out = []
    for i, t in enumerate((table, new)):
        (tmp_path / str(i)).mkdir()
        out.append(gtmkit.build_index(write(tmp_path / str(i), t, sd), tmp_path / str(i) / "idx"))
    return out, (catalog_rows(table, schema), catalog_rows(new, schema)), schema




def check_batch_across_swap(tmp_path, make_gpu) -> None:
    """A batch stacked (and on the GPU uploaded) for one index, used after a swap to a rebuild whose country domain
    and location dictionary grew: the post-filter equals the CPU's on freshly encoded requests, and old requests
    answer by brute force."""
    from gtmkit.matcher.matcher import Matcher
    from support.step_cases import host

    def grow(t):
        d = t.to_pydict()
        d["country"] = [["BR"] if i % 4 == 0 else v for i, v in enumerate(d["country"])]
        d["location"] = [["IT:RM"] if i % 3 == 0 else v for i, v in enumerate(d["location"])]
        return pa.table(d, schema=t.schema)
    (a, b), (_, rows_b), schema = _two_versions(tmp_path, grow)
    gpu, cpu = make_gpu(a), Matcher(b, "cpu")
    rng = np.random.default_rng(2)
    users = [_user(rng) for _ in range(6)] + [{"country": "BR"}, {"location": ["IT:RM"]}]
    reqs = [gpu.encode_request(u) for u in users]
    q = gpu.batch(reqs)
    gpu.swap(b)
    leaves = np.tile(np.arange(b.first_leaf, b.num_nodes), (len(users), 1))
    fresh = cpu.postfilter(leaves, [b.encode_request(u) for u in users])
    for (x, rx), (y, ry) in zip(gpu.postfilter(leaves, q), fresh):
        assert host(x).tolist() == y.tolist() and host(rx).tolist() == ry.tolist()
    assert any(len(y) for y, _ in fresh)
    serves_old_requests(gpu, rows_b, schema, list(zip(users, reqs)))
