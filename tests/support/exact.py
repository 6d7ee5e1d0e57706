"""The check that a matcher serves a catalog exactly, shared by the update and rebuild tests."""

from __future__ import annotations

import numpy as np

from gtmkit.testing.gtm import eligible


def serves_exactly(m, rows, schema, users, paused=()) -> None:
    """For each user: the post-filter over every leaf returns exactly the eligible ads of `rows` (catalog_rows) that
    are not paused, in SID rank order then id, and every prefix of each passes GTM."""
    idx = m.current().index
    reqs = [idx.encode_request(u) for u in users]
    leaves = np.tile(np.arange(idx.first_leaf, idx.num_nodes), (len(users), 1))
    sid_of = {ad["ad_id"]: ad["sid"] for ad in rows}
    for b, (ads, rank) in enumerate(m.postfilter(leaves, reqs)):
        want = sorted((idx.find(ad["sid"]) - idx.first_leaf, ad["ad_id"]) for ad in rows
                      if ad["ad_id"] not in paused and eligible(ad, users[b], schema))
        assert list(zip(rank.tolist(), ads.tolist())) == want
        for _, ad_id in want:
            n = 0
            for tok in sid_of[ad_id]:
                n = idx.child(n, tok)
                assert idx.node_passes(n, reqs[b])
