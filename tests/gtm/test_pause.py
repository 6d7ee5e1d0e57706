"""Paused ads, updates and swaps on the CPU matcher, against brute force over the active catalog: a hypothesis state
machine pauses and resumes random ads, updates ads (edits of targeting and SID, new ads on existing SIDs and on
SIDs the trie lacks, those left out in place and added by a shard rebuild) and swaps to another catalog's index; after every change, for random users, the
post-filter returns exactly the eligible active ads, step and mask prune exactly the prefixes with no active ad
(with GTM on and off, in both top-k selections), and every prefix of an eligible active ad still passes GTM."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import gtmkit
from gtmkit.errors import RequestError
from gtmkit.matcher.matcher import Matcher
from gtmkit.testing.gtm import catalog_rows, eligible, live_nodes, mask_reference, step_reference

from support.catalogs import random_catalog, random_user, schema_dict, write
from support.indexes import MODES
from support.pause_cases import changes_for

N_ADS = 90


@functools.lru_cache(maxsize=None)
def _index(mode: str, seed: int = 7):
    """One small index per partition mode and catalog seed, built once for the whole machine run."""
    kw = dict(MODES)[mode]
    work = Path(tempfile.mkdtemp(prefix="gtmkit-pause-"))
    table = random_catalog(seed, n_ads=N_ADS, L=3, V=5, n_sids=30)
    sd = schema_dict(L=3, V=5)
    idx = gtmkit.build_index(write(work, table, sd), work / "idx", partition=mode, **kw)
    from gtmkit.inputs.schema import parse_schema
    return idx, catalog_rows(table, parse_schema(sd)), parse_schema(sd)


def _copy(cached) -> tuple:
    """A copy of a cached index's path, loaded: a shard rebuild writes its new version there, and a writer publishes
    only over the version it read, so each example writes to its own copy and the cached one stays as built."""
    idx, rows, schema = cached
    work = Path(tempfile.mkdtemp(prefix="gtmkit-pause-copy-"))
    atexit.register(shutil.rmtree, work, True)
    shutil.copytree(idx.path, work / "idx")
    return gtmkit.load_index(work / "idx", verify=False), rows, schema


class PauseMachine(RuleBasedStateMachine):
    @initialize(mode=st.sampled_from([m for m, _ in MODES]), seed=st.integers(0, 2**32 - 1),
                selection=st.sampled_from(["band", "buckets"]))
    def start(self, mode, seed, selection):
        self.mode = mode
        self.idx, self.rows, self.schema = _copy(_index(mode))
        self.m = Matcher(self.idx, cpu_selection=selection)  # both top-k selections of the CPU step, kept by swap
        self.paused = set()
        self.rng = np.random.default_rng(seed)
        self.ids = [ad["ad_id"] for ad in self.rows]

    @rule(catalog=st.sampled_from([7, 8]))
    def swap(self, catalog):
        """Another catalog's index (or a reload of this one): served from the next call, nothing paused in it."""
        self.idx, self.rows, self.schema = _copy(_index(self.mode, catalog))
        assert self.m.swap(self.idx) == self.idx.version
        self.paused = set()
        self.ids = [ad["ad_id"] for ad in self.rows]

    @rule(seed=st.integers(0, 2**32 - 1), edits=st.integers(0, 6), new=st.integers(1, 6), off_trie=st.integers(0, 2))
    def update(self, seed, edits, new, off_trie):
        """Edited ads (new targeting, some a new SID), new ads on SIDs in the trie and on SIDs it lacks: the
        latter are reported and left out; the rest serve from the next call, paused ads still paused."""
        table, self.rows, left_out = changes_for(self.rows, self.schema, seed, edits, new, off_trie, L=3, V=5)
        report = self.m.update_ads(table)
        assert sorted(report.new_sids) == sorted(left_out)
        assert report.edited + report.added == table.num_rows - len(left_out)
        self.ids = [ad["ad_id"] for ad in self.rows]
        self.idx = self.m.current().index

    @rule(seed=st.integers(0, 2**32 - 1), edits=st.integers(0, 4), new=st.integers(0, 4), off_trie=st.integers(1, 3))
    def rebuild(self, seed, edits, new, off_trie):
        """The same kinds of changes with ads on SIDs the trie lacks added too, by a shard rebuild of the index
        serving now, written as the artifact's new version with the paused ads; the matcher swaps to it."""
        table, rows, left_out = changes_for(self.rows, self.schema, seed, edits, new, off_trie, L=3, V=5)
        index, report = gtmkit.rebuild_shards(self.m.current().index, table, paused=sorted(self.paused))
        assert report.new_sids == [] and report.edited + report.added == table.num_rows
        self.rows = rows + [ad for ad in catalog_rows(table, self.schema) if ad["ad_id"] in set(left_out)]
        self.ids = [ad["ad_id"] for ad in self.rows]
        assert self.m.swap(index) == index.version
        self.idx = index

    @rule(pick=st.lists(st.integers(0, N_ADS - 1), max_size=40))
    def pause(self, pick):
        ids = [self.ids[i % len(self.ids)] for i in pick]
        assert self.m.pause_ads(ids) == len(set(ids) - self.paused)
        self.paused |= set(ids)

    @rule(pick=st.lists(st.integers(0, N_ADS - 1), max_size=40))
    def resume(self, pick):
        ids = [self.ids[i % len(self.ids)] for i in pick]
        assert self.m.resume_ads(ids) == len(set(ids) & self.paused)
        self.paused -= set(ids)

    @rule(everything=st.booleans())
    def pause_or_resume_all(self, everything):
        if everything:
            self.m.pause_ads(self.ids)
            self.paused = set(self.ids)
        else:
            self.m.resume_ads(self.ids)
            self.paused = set()

    @invariant()
    def matches_brute_force(self):
        if not hasattr(self, "m"):
            return
        idx, m, rng = self.idx, self.m, self.rng
        assert m.version == idx.version
        active = [ad for ad in self.rows if ad["ad_id"] not in self.paused]
        live = live_nodes(idx, {ad["sid"] for ad in active})
        assert m.num_paused == len(self.paused)
        assert m.paused_ads().tolist() == sorted(self.paused)
        users = [random_user(rng) for _ in range(3)]
        reqs = [idx.encode_request(u) for u in users]
        # post-filter over every SID: exactly the eligible active ads
        leaves = np.tile(np.arange(idx.first_leaf, idx.num_nodes), (3, 1))
        for b, (ads, rank) in enumerate(m.postfilter(leaves, reqs)):
            want = sorted((idx.find(ad["sid"]) - idx.first_leaf, ad["ad_id"]) for ad in active
                          if eligible(ad, users[b], self.schema))
            assert list(zip(rank.tolist(), ads.tolist())) == want
            for _, ad_id in want:  # GTM never prunes an eligible active ad's prefixes
                sid = next(ad["sid"] for ad in active if ad["ad_id"] == ad_id)
                n = 0
                for tok in sid:
                    n = idx.child(n, tok)
                    assert idx.node_passes(n, reqs[b])
        # step and mask: CD prunes exactly the nodes without an active ad
        for depth in range(idx.sid_length):
            lo, hi = idx.level_offsets[depth], idx.level_offsets[depth + 1]
            nodes = rng.integers(lo, hi, size=6)
            rr = np.repeat(np.arange(3), 2)
            lp = np.round(rng.normal(size=(6, idx.vocab_size)), 1).astype(np.float32)
            bs = np.round(rng.normal(size=6), 1).astype(np.float32)
            for gtm in (True, False):
                k = int(rng.integers(1, 8))
                got = m.step(nodes, lp, bs, rr, reqs, k, gtm=gtm, count_candidates=True)
                for b, (par, tok, kid, sc, n) in enumerate(step_reference(idx, nodes, lp, bs, rr, reqs, k, gtm, live)):
                    assert got.parent_rows[b].tolist() == par + [-1] * (k - len(par))
                    assert got.nodes[b][:len(kid)].tolist() == kid
                    assert got.tokens[b][:len(tok)].tolist() == tok
                    assert np.array_equal(got.scores[b][:len(sc)], np.array(sc, np.float32))
                    assert got.num_candidates[b] == n
                if not gtm:
                    assert m.step(nodes, lp, bs, rr, reqs, k, gtm=False).num_candidates.tolist() == \
                        got.num_candidates.tolist()
                assert np.array_equal(m.mask(nodes, rr, reqs, gtm=gtm),
                                      mask_reference(idx, nodes, rr, reqs, gtm, live))


TestPauseMachine = pytest.mark.slow(PauseMachine.TestCase)  # ~90 s: the full suite runs it, the fast loop not
TestPauseMachine.settings = settings(max_examples=25, stateful_step_count=6, deadline=None)


def test_unknown_or_malformed_ids_change_nothing():
    idx, rows, _ = _index("none")
    m = Matcher(idx)
    known = rows[0]["ad_id"]
    for bad in ([known, 10**12], ["x"], [1.5], "abc", [2**70]):
        with pytest.raises(RequestError):
            m.pause_ads(bad)
        assert m.num_paused == 0
    assert m.pause_ads(known) == 1 and m.pause_ads(np.array([known])) == 0
    assert m.resume_ads([]) == 0 and m.resume_ads([known]) == 1


def test_beam_search_never_reaches_a_paused_sid():
    """Pause every ad of the SIDs a search found: the same search (same log-probs) finds none of them again,
    and returns none of their ads."""
    from gtmkit.matcher.beam import beam_search
    idx, rows, _ = _index("static")
    m = Matcher(idx)
    rng = np.random.default_rng(3)
    reqs = [idx.encode_request(random_user(rng)) for _ in range(2)]
    table = np.log(rng.random((idx.sid_length, 64, idx.vocab_size)) + 1e-3).astype(np.float32)
    logits = lambda step, prev, parents: table[step, :len(prev)]  # noqa: E731
    first = beam_search(m, reqs, logits, beam_sizes=[1, 4, 4], gtm=False)
    found = {int(n) for n in first.leaf_nodes.ravel() if n >= 0}
    assert found
    m.pause_ads([a for n in found for a in idx.sid_ads(n).tolist()])
    again = beam_search(m, reqs, logits, beam_sizes=[1, 4, 4], gtm=False)
    assert not found & {int(n) for n in again.leaf_nodes.ravel() if n >= 0}
    paused = set(m.paused_ads().tolist())
    assert not paused & {int(a) for ads, _ in again.ads for a in ads}
