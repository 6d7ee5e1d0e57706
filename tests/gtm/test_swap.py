"""Matcher.swap: a rebuilt index served from the next call, calls in flight and held matchers finishing on theirs,
a version on every result; and four threads searching while a fifth swaps and pauses, every result checked by
brute force over the catalog of the version it names (a search that a pause overtakes may see it from any call on:
each ad it returns is then eligible, and every eligible ad that was never paused is returned)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import gtmkit
from gtmkit.errors import GtmkitError
from gtmkit.formats.schema import parse_schema
from gtmkit.matcher.beam import beam_search
from gtmkit.matcher.served import Matcher
from gtmkit.testing.gtm import catalog_rows, eligible

from support.catalogs import random_catalog, random_user, schema_dict, write

SIZES = [1, 4, 6]


def _versions(tmp_path, n=3):
    """n catalogs, each built into the same artifact path in turn: -> [(index, catalog rows)] (older versions stay
    readable while their Index is open)."""
    sd = schema_dict(L=3, V=6)
    out = []
    for s in range(n):
        table = random_catalog(40 + s, n_ads=120, L=3, V=6, n_sids=40)
        idx = gtmkit.build_index(write(tmp_path, table, sd, f"c{s}.parquet"), tmp_path / "idx", partition="static",
                                 k=[2, 2, 2], overwrite=True)
        out.append((idx, catalog_rows(table, parse_schema(sd))))
    return out, parse_schema(sd)


def _logits(V, seed):
    table = np.log(np.random.default_rng(seed).random((3, 64, V)) + 1e-3).astype(np.float32)
    return lambda step, prev, parents: table[step, :len(prev)]


def _check(res, users, rows, paused, schema, idx):
    """The search's SIDs hold an active ad of the catalog; its ads are exactly the eligible active ones of them."""
    active = [ad for ad in rows if ad["ad_id"] not in paused]
    live_sids = {ad["sid"] for ad in active}
    for b, (ads, rank) in enumerate(res.ads):
        leaves = [int(n) for n in res.leaf_nodes[b]]
        for n in leaves:
            assert n < 0 or idx.leaf_sid(n) in live_sids
        want = [(ad["ad_id"], m) for m, n in enumerate(leaves) if n >= 0 for ad in sorted(
            active, key=lambda a: a["ad_id"]) if ad["sid"] == idx.leaf_sid(n) and eligible(ad, users[b], schema)]
        assert list(zip(ads.tolist(), rank.tolist())) == want


def test_swap_serves_the_new_index_from_the_next_call(tmp_path):
    ((va, ra), (vb, rb)), sd = _versions(tmp_path, 2)
    m = Matcher(va)
    assert m.version == va.version != vb.version
    held = m.current()
    rng = np.random.default_rng(1)
    users = [random_user(rng) for _ in range(2)]
    assert m.swap(vb) == vb.version and m.version == vb.version
    new = beam_search(m, [vb.encode_request(u) for u in users], _logits(6, 0), SIZES)
    old = beam_search(held, [va.encode_request(u) for u in users], _logits(6, 0), SIZES)
    assert new.version == vb.version and old.version == va.version  # the held matcher still answers the old one
    _check(new, users, rb, set(), sd, vb)
    _check(old, users, ra, set(), sd, va)
    st = m.step(np.zeros(1, np.int64), np.zeros((1, 6), np.float32), np.zeros(1, np.float32), np.zeros(1, np.int64),
                [vb.encode_request(users[0])], 3)
    assert st.version == vb.version
    with pytest.raises(GtmkitError):
        m.swap("not an index")
    assert m.version == vb.version


@pytest.mark.slow
def test_searches_while_swapping_and_pausing(tmp_path):
    versions, schema = _versions(tmp_path, 3)
    by_version = {idx.version: (idx, rows) for idx, rows in versions}
    assert len(by_version) == 3
    paused_of = {idx.version: {ad["ad_id"] for ad in rows[::3]} for idx, rows in versions}
    m = Matcher(versions[0][0])
    m.pause_ads(sorted(paused_of[m.version]))
    stop = time.monotonic() + 20.0
    errors, results = [], []

    def search(seed):
        rng = np.random.default_rng(seed)
        try:
            while time.monotonic() < stop:
                cur = m.current()
                users = [random_user(rng) for _ in range(2)]
                reqs = [cur.index.encode_request(u) for u in users]
                res = beam_search(cur, reqs, _logits(6, int(rng.integers(1 << 30))), SIZES)
                results.append((res, users))
        except Exception as exc:  # any exception fails the test below
            errors.append(repr(exc))

    def swapper():
        try:
            i = 0
            while time.monotonic() < stop:
                i += 1
                idx, _ = versions[i % 3]
                m.swap(idx)
                m.pause_ads(sorted(paused_of[idx.version]))
                time.sleep(0.01)
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=search, args=(s,)) for s in range(4)] + [threading.Thread(target=swapper)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert len({r.version for r, _ in results}) == 3 and len(results) > 20
    for res, users in results[::max(1, len(results) // 200)]:  # brute force on 200 spread over the run
        idx, rows = by_version[res.version]
        sids = {ad["sid"] for ad in rows}
        by_id = {ad["ad_id"]: ad for ad in rows}
        for b, (ads, rank) in enumerate(res.ads):
            leaves = [int(n) for n in res.leaf_nodes[b]]
            assert all(n < 0 or idx.leaf_sid(n) in sids for n in leaves)
            got = list(zip(ads.tolist(), rank.tolist()))
            assert got == sorted(got, key=lambda x: (x[1], x[0]))  # SID rank order, then ad id
            for ad_id, m in got:  # every ad returned: of that SID and eligible
                assert by_id[ad_id]["sid"] == idx.leaf_sid(leaves[m]) and eligible(by_id[ad_id], users[b], schema)
            never = [(ad["ad_id"], m) for m, n in enumerate(leaves) if n >= 0 for ad in rows
                     if ad["sid"] == idx.leaf_sid(n) and ad["ad_id"] not in paused_of[res.version]
                     and eligible(ad, users[b], schema)]
            assert set(never) <= set(got)  # and every eligible ad that was never paused
