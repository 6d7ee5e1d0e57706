"""Requests follow the index they are used with (docs/design.md §9): a request encoded before a swap to a rebuild
(new domain values, moved targeting, new strings), an in-place update (new strings, new ads) or a shard rebuild (new
SIDs) answers as one encoded against the index serving the call. Every answer is checked by brute force over the
catalog the matcher serves."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings

import gtmkit
from gtmkit.errors import RequestError
from gtmkit.matcher.matcher import Matcher
from gtmkit.targeting.semantics import Request

from support.catalogs import random_catalog, write
from support.stale_cases import L, V, StaleRequests, _retarget, _schema, _two_versions, _user, serves_old_requests

StaleRequests.TestCase.settings = settings(max_examples=12, stateful_step_count=6, deadline=None,
                                           suppress_health_check=list(HealthCheck))
test_stale_requests_answer_as_fresh_ones = StaleRequests.TestCase


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
