"""Tries past 2^31 nodes (a billion keyword-like keys make ~2.8 billion): node ids travel as int64 on the CPU,
the live heap ranks ids above 2^31 as the GPU's 32-bit composites do, and the loader takes up to 2^32-1 nodes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gtmkit.errors import GtmkitError
from gtmkit.artifact.array_checks import FieldError
from gtmkit.trie.build import levels_arrays
from gtmkit.artifact.trie_checks import manifest_counts
from gtmkit.artifact.trie_format import MAX_NODES
from gtmkit.trie.nav import child_range, labels_of
from gtmkit.trie.search_cpu import live_push, live_sort

from support.tries import random_trie


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 12))
def test_live_heap_keeps_the_best_with_ids_past_int32(seed, n, cap):
    rng = np.random.default_rng(seed)
    nodes = np.unique(rng.integers(2**31 - 8, MAX_NODES, n, dtype=np.int64))
    rng.shuffle(nodes)
    n = len(nodes)
    scores = rng.choice(np.float32([-1.0, -2.0, -3.0]), n)  # ties, so the id order decides
    hs, hp = np.empty(cap, np.float32), np.empty(cap, np.int32)
    ht, hn = np.empty(cap, np.int32), np.empty(cap, np.int64)
    k = 0
    for i in range(n):
        k = live_push(hs, hp, ht, hn, k, scores[i], i, 0, nodes[i])
    live_sort(hs, hp, ht, hn, k)
    want = sorted(zip(-scores.astype(np.float64), nodes.tolist()))[:cap]
    assert list(zip((-hs[:k]).astype(np.float64), hn[:k].tolist())) == want


def test_manifest_takes_up_to_2_to_the_32_minus_1_nodes():
    man = {"num_nodes": MAX_NODES, "num_keys": 10, "high_bits": 0, "max_depth": 3}
    assert manifest_counts(man)[0] == 2**32 - 1
    with pytest.raises(FieldError):
        manifest_counts(dict(man, num_nodes=2**32))


class _Lazy:
    """A piece read when called, as the sharded build passes its shard files."""

    def __init__(self, a):
        self.a, self.calls = a, 0

    def __len__(self):
        return len(self.a)

    def __call__(self):
        self.calls += 1
        return self.a


def test_levels_from_lazy_pieces_equal_levels_from_arrays():
    trie, _ = random_trie(np.random.default_rng(5), 300)
    a = trie.arrays
    lo = a.level_offsets
    lab = labels_of(a, np.arange(1, trie.num_nodes, dtype=np.int64)).astype(np.int32)
    labels = [[np.zeros(0, np.int32)]] + [[lab[lo[d] - 1:lo[d + 1] - 1]] for d in range(1, len(lo) - 1)]
    deg = np.array([np.diff(child_range(a, v))[0] for v in range(trie.num_nodes)], np.int32)
    term = np.unpackbits(np.asarray(a.terminal).view(np.uint8), bitorder="little")[:trie.num_nodes].astype(bool)
    terminal = [[term[lo[d]:lo[d + 1]]] for d in range(len(lo) - 1)]
    degree = [[deg[lo[d]:lo[d + 1]]] for d in range(len(lo) - 1)]
    whole = levels_arrays(labels, terminal, degree)
    lazy = [[[_Lazy(x) for x in pieces] for pieces in part] for part in (labels, terminal, degree)]
    split = levels_arrays(*lazy)
    for name, arr in whole["arrays"].items():
        assert np.array_equal(arr, split["arrays"][name]), name
        assert np.array_equal(arr, getattr(a, name)), name
    assert all(p.calls >= 1 for part in lazy for pieces in part[1:] for p in pieces)


def test_node_count_past_the_limit_is_refused_in_one_line():
    class Huge:
        def __len__(self):
            return MAX_NODES

    with pytest.raises(GtmkitError, match="more than 4294967295"):
        levels_arrays([[np.zeros(0, np.int32)], [Huge()]], [[np.zeros(1, bool)], [Huge()]],
                      [[np.ones(1, np.int32)], [Huge()]])
