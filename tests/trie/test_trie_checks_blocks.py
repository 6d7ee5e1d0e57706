"""The full trie check (SuccinctTrie.load(verify=True)) walks the LOUDS bits in blocks, so that a trie of billions
of nodes checks in bounded memory: with blocks of one or two words (every run of children, every leaf test and
every level offset split across blocks) it must report exactly what one block over the whole trie reports, on
sound tries and on tries with their bits, labels, levels and terminal flags edited."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gtmkit.artifact.trie_checks as C
from gtmkit.trie import nav
from gtmkit.trie.trie import SuccinctTrie

EDITS = ["none", "louds_bit", "labels_swap", "label_high", "terminal_bit", "level", "louds_swap"]


def _arrays(keys, edit, rng):
    trie = SuccinctTrie.build(keys)
    a = {k: np.array(v) for k, v in nav.all_fields(trie.arrays).items()}
    n = trie.num_nodes
    if edit == "louds_bit":
        p = int(rng.integers(0, 2 * n + 1))
        a["louds"][p >> 6] ^= np.uint64(1) << np.uint64(p & 63)
    elif edit == "louds_swap" and n > 3:  # two bits swapped: the count stays, the tree breaks or moves
        p, q = (int(x) for x in rng.integers(2, 2 * n + 1, 2))
        bp = (int(a["louds"][p >> 6]) >> (p & 63)) & 1
        bq = (int(a["louds"][q >> 6]) >> (q & 63)) & 1
        if bp != bq:
            for x in (p, q):
                a["louds"][x >> 6] ^= np.uint64(1) << np.uint64(x & 63)
    elif edit == "labels_swap" and len(a["label_low"]) > 2:  # head labels: a tail store holds the others
        i = int(rng.integers(0, len(a["label_low"]) - 1))
        a["label_low"][i], a["label_low"][i + 1] = a["label_low"][i + 1], a["label_low"][i]
    elif edit == "label_high" and len(a["label_high"]):
        a["label_high"][-1] |= np.uint64(1) << np.uint64(63)
    elif edit == "terminal_bit":
        v = int(rng.integers(0, n))
        a["terminal"][v >> 6] ^= np.uint64(1) << np.uint64(v & 63)
    elif edit == "level" and len(a["level_offsets"]) > 2:
        a["level_offsets"][int(rng.integers(1, len(a["level_offsets"]) - 1))] += 1
    return a, trie


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0, 1, 2, 3, 70000, 2**20]), min_size=1, max_size=6), min_size=1,
                max_size=80), st.sampled_from(EDITS), st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 3]))
def test_blocks_report_what_one_block_reports(keys, edit, seed, words):
    a, trie = _arrays(keys, edit, np.random.default_rng(seed))
    a["high_bits"] = trie.arrays.high_bits
    whole = list(C._tree_problems(C.Path("t"), a, trie.num_nodes))
    saved = C.BLOCK_WORDS
    try:
        C.BLOCK_WORDS = words
        blocks = list(C._tree_problems(C.Path("t"), a, trie.num_nodes))
    finally:
        C.BLOCK_WORDS = saved
    assert blocks == whole
    if edit == "none":
        assert whole == []


def test_edits_are_found_across_blocks(monkeypatch):
    """One-word blocks: a flipped LOUDS bit (the ones no longer count the nodes) and two siblings' labels swapped
    (the root's children sit in the first words, the swap at a block's edge for some keys) are both reported."""
    rng = np.random.default_rng(3)
    keys = [list(map(int, rng.integers(0, 50, size=rng.integers(1, 5)))) for _ in range(400)]
    monkeypatch.setattr(C, "BLOCK_WORDS", 1)
    for seed in range(20):
        a, trie = _arrays(keys, "louds_bit", np.random.default_rng(seed))
        a["high_bits"] = trie.arrays.high_bits
        assert list(C._tree_problems(C.Path("t"), a, trie.num_nodes)), seed
    a, trie = _arrays(keys, "none", rng)
    a["high_bits"] = trie.arrays.high_bits
    for i in range(0, 48, 7):  # children i+1, i+2 of the root (it has 50)
        b = dict(a, label_low=a["label_low"].copy())
        b["label_low"][i], b["label_low"][i + 1] = b["label_low"][i + 1], b["label_low"][i]
        found = list(C._tree_problems(C.Path("t"), b, trie.num_nodes))
        assert any("children of node 0" in f for f in found), (i, found)
