"""Matcher.swap: a rebuilt index served from the next call, calls in flight and held matchers finishing on theirs,
a version on every result; and four threads searching while a fifth swaps and pauses, every result checked by
brute force over the catalog of the version it names (a search that a pause overtakes may see it from any call on:
each ad it returns is then eligible, and every eligible ad that was never paused is returned)."""

from __future__ import annotations


import numpy as np
import pytest

from gtmkit.errors import GtmkitError
from gtmkit.matcher.beam import beam_search
from gtmkit.matcher.matcher import Matcher
from gtmkit.testing.gtm import eligible

from support.catalogs import random_user
from support.pause_cases import SIZES, logits as _logits, serve_while_swapping, versions as _versions


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
    serve_while_swapping(tmp_path, "cpu", 5.0)
