"""Index build: trie contents, GTM conservativeness, exact eligibility and dedup, on random catalogs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gtmkit
from gtmkit.testing.gtm import ad_matcher_rows, catalog_rows, eligible, union_rows

from support.catalogs import random_user
from support.indexes import MODES, _build

def _all_leaves(idx):
    return range(idx.first_leaf, idx.num_nodes)


def test_trie_holds_exactly_the_catalog_sids(tmp_path):
    idx, table, schema = _build(tmp_path, 1, "none", {}, n_ads=200, L=4, V=5)
    want = {tuple(s) for s in table.column("sid").to_pylist()}
    got = [idx.leaf_sid(n) for n in _all_leaves(idx)]
    assert len(got) == len(set(got)) == idx.num_sids
    assert set(got) == want
    assert got == sorted(got)  # leaves in SID order
    for sid in want:
        assert idx.leaf_sid(idx.find(sid)) == sid
    assert idx.find((0,) * 5) == -1
    # children sorted, unique, BFS-numbered
    for node in range(idx.first_leaf):
        toks, kids = idx.children(node)
        assert np.all(np.diff(toks) > 0)
        for t, c in zip(toks, kids):
            assert idx.child(node, int(t)) == c and idx.parent(int(c)) == node
    # every ad sits under its SID
    rows = catalog_rows(table, schema)
    for ad in rows:
        assert ad["ad_id"] in idx.sid_ads(idx.find(ad["sid"]))
    assert sum(len(idx.sid_ads(n)) for n in _all_leaves(idx)) == idx.num_ads == len(rows)


@pytest.mark.parametrize("mode,kw", MODES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), L=st.integers(1, 4), V=st.integers(2, 7), n_ads=st.integers(1, 80),
       domain=st.booleans())
def test_gtm_never_prunes_an_eligible_ad(tmp_path, mode, kw, seed, L, V, n_ads, domain):
    if mode == "static":
        kw = {"k": [2, 3, 2, 3][:L]}
    idx, table, schema = _build(tmp_path, seed, mode, kw, n_ads=n_ads, L=L, V=V, domain=domain,
                                name=f"h{L}{V}{n_ads}{int(domain)}")
    rows = catalog_rows(table, schema)
    rng = np.random.default_rng(seed)
    all_ids = np.array([ad["ad_id"] for ad in rows], np.int64)
    for _ in range(6):
        user = random_user(rng)
        req = idx.encode_request(user)
        want = np.array([eligible(ad, user, schema) for ad in rows])
        assert np.array_equal(idx.ad_eligible(all_ids, req), want)
        for ad, ok in zip(rows, want):
            if ok:
                for d in range(L + 1):
                    node = idx.find(ad["sid"][:d])
                    assert idx.node_passes(node, req), (ad, user, d)


@pytest.mark.parametrize("mode,kw", MODES)
def test_matchers_resolve_to_subtree_unions(tmp_path, mode, kw):
    """Dedup ids resolve to the rows they replaced: OR of a node's partitions == union of its ads' rows,
    and with no partitioning the single stored row is exactly that union."""
    idx, table, schema = _build(tmp_path, 3, mode, kw, n_ads=120)
    rows = catalog_rows(table, schema)
    by_prefix = {}
    for ad in rows:
        bm, blooms = ad_matcher_rows(ad, schema, idx.layout)
        for d in range(schema.sid_length + 1):
            by_prefix.setdefault(ad["sid"][:d], []).append((bm, blooms))
    for prefix, members in by_prefix.items():
        node = idx.find(prefix)
        parts = idx.node_partitions(node)
        assert 1 <= len(parts) <= max(1, len(members)) or mode == "none"
        got_bm = union_rows([idx.bitmask_table[idx.part_bitmask_ids[p]] for p in parts])
        assert np.array_equal(got_bm, union_rows([m[0] for m in members]))
        for b in range(len(schema.bloom)):
            got = union_rows([idx.bloom_tables[b][idx.part_bloom_ids[p, b]] for p in parts])
            assert np.array_equal(got, union_rows([m[1][b] for m in members]))
        if mode == "none":
            assert len(parts) == 1
    # the ad-level bitmask rows are the reference rows
    for ad in rows:
        r = idx.ad_rows([ad["ad_id"]])[0]
        assert np.array_equal(idx.bitmask_table[idx.ad_bitmask_ids[r]], ad_matcher_rows(ad, schema, idx.layout)[0])


def test_tables_are_deduplicated(tmp_path):
    idx, _, _ = _build(tmp_path, 4, "static", {"k": [2, 2, 2]}, n_ads=150)
    for t in [idx.bitmask_table, *idx.bloom_tables]:
        assert len({bytes(r) for r in np.asarray(t)}) == len(t)
    st_ = idx.stats()
    for lv in st_["levels"]:
        for t in lv["tables"]:
            assert t["unique_rows"] <= t["rows"] and t["bytes_after"] <= t["bytes_before"]


def test_static_respects_k_and_dynamic_respects_k_max(tmp_path):
    idx, _, _ = _build(tmp_path, 5, "static", {"k": [1, 3, 2]}, n_ads=150)
    for d, k in zip(range(1, 4), [1, 3, 2]):
        lo, hi = idx.level_offsets[d], idx.level_offsets[d + 1]
        assert max(len(idx.node_partitions(n)) for n in range(lo, hi)) <= k
    idx, _, _ = _build(tmp_path, 5, "dynamic", {"target_fill": 0.05, "k_max": 3}, n_ads=150)
    assert max(len(idx.node_partitions(n)) for n in range(idx.num_nodes)) <= 3
    assert idx.stats()["partition"]["layout"] == "jagged"


def test_request_errors(tmp_path):
    idx, _, _ = _build(tmp_path, 6, "none", {})
    with pytest.raises(gtmkit.RequestError, match="unknown request attribute 'colour'"):
        idx.encode_request({"colour": "red"})
    with pytest.raises(gtmkit.RequestError, match="'age'"):
        idx.encode_request({"age": 25})
    with pytest.raises(gtmkit.RequestError, match="unknown ad id"):
        idx.ad_eligible([-5], idx.encode_request({}))
    idx.encode_request({"_interests": [1, 2]})  # metadata keys are ignored


def test_round_trip_load(tmp_path):
    idx, _, _ = _build(tmp_path, 7, "dynamic", {"target_fill": 0.3, "k_max": 4})
    again = gtmkit.load_index(idx.path)
    assert again.num_sids == idx.num_sids and again.stats()["levels"] == idx.stats()["levels"]
    for n in range(idx.num_nodes):
        assert np.array_equal(again.node_partitions(n), idx.node_partitions(n))
    for name in idx.artifact.names:
        assert np.array_equal(idx.artifact.array(name), again.artifact.array(name))
