"""Random tries, proposals and search settings for the succinct-trie search tests."""

from __future__ import annotations

import math

import numpy as np

from gtmkit.trie.trie import SuccinctTrie
from gtmkit.testing.trie import RefTrie

VOCAB = [0, 1, 2, 3, 4, 65536, 70001, 2**31 - 1]


def random_trie(rng, n_keys):
    # few tokens, many keys: wide nodes, so live lists overflow the beam and the cut hits ties
    keys = [[int(x) for x in rng.choice(VOCAB, size=rng.integers(1, 5))] for _ in range(n_keys)]
    return SuccinctTrie.build(keys), RefTrie(keys)


def random_logp(rng, shape, ties):
    if ties:  # few distinct values: exact ties in sums exercise the tie rules
        return rng.choice(np.float32([-0.25, -0.5, -1.0, -2.0]), size=shape)
    return np.log(rng.random(shape) + 1e-6).astype(np.float32)


def random_tokens(rng, shape):
    # mostly trie tokens, some repeats within a row, some that match nothing (-1 padding, unused ids)
    return rng.choice(VOCAB + [-1, 5, 99], size=shape)


def random_settings(rng, seed):
    """(theta_tok, theta_sent, alpha) for a random search: thresholds equal to tied log-probs and sums
    test the strict comparisons; alpha by seed."""
    theta_tok = float(rng.choice([-math.inf, -1.0, -1.2]))
    theta_sent = float(rng.choice([-math.inf, -3.0, -1.5]))
    return theta_tok, theta_sent, [0.0, 0.7, -1.5][seed % 3]


def assert_same(got_ids, got_scores, want_ids, want_scores, bw):
    assert got_ids.tolist() == want_ids + [-1] * (bw - len(want_ids))
    np.testing.assert_allclose(got_scores[:len(want_ids)], want_scores, rtol=0, atol=1e-5)
    assert np.all(np.isneginf(got_scores[len(want_ids):]))


def layout_trie(rng, kind: str, n: int = None):
    """(trie, RefTrie) of keys whose build picks a label layout of format 3: "tails" (long single-child chains with
    shared suffixes), "sid" (SID-like: 8-bit labels, a constant last level) or "mixed" (8-bit heads, chains below
    them, a constant last level)."""
    n = int(rng.integers(20, 300)) if n is None else n
    if kind == "tails":
        keys = [[int(x) for x in rng.integers(0, 4, size=2)] + [int(x) for x in rng.integers(69990, 70030, size=4)]
                + [[0], [7, 0], [70000, 3, 0]][int(rng.integers(0, 3))] for _ in range(n)]
    elif kind == "sid":
        keys = [[int(x) for x in rng.integers(0, 200, size=3)] + [0] for _ in range(n)]
    else:
        keys = [[int(x) for x in rng.integers(0, 6, size=2)] + [int(x) for x in rng.integers(0, 20, size=4)]
                + [0] for _ in range(n)]
    return SuccinctTrie.build(keys), RefTrie(keys)

