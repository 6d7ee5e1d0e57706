"""CPU constrained beam search over a SuccinctTrie (NAR and AR) against the plain-Python reference:
same key ids, scores within 1e-5, with thresholds, length normalisation, ties and repeated tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gtmkit.errors import GtmkitError
from gtmkit.trie.trie import SuccinctTrie
from gtmkit.trie.search import TrieBeamStepper, trie_beam_search
from gtmkit.trie.search_cpu import length_factors
from gtmkit.testing.trie import ArProposals, NarProposals, ref_beam_search

from support.tries import assert_same, random_logp, random_tokens, random_trie


PARAMS = st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 6), st.sampled_from([-math.inf, -1.2]),
                   st.sampled_from([-math.inf, -3.0]), st.sampled_from([0.0, 0.7, -1.5]), st.booleans())


@settings(max_examples=50, deadline=None)
@given(PARAMS)
def test_nar_matches_reference(params):
    seed, bw, theta_tok, theta_sent, alpha, ties = params
    rng = np.random.default_rng(seed)
    trie, ref = random_trie(rng, int(rng.integers(1, 40)))
    b, T, K = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 9))
    tokens, logp = random_tokens(rng, (b, T, K)), random_logp(rng, (b, T, K), ties)
    ids, scores = trie_beam_search(trie, tokens, logp, bw, theta_tok, theta_sent, alpha)
    assert ids.shape == (b, bw) and ids.dtype == np.int64 and scores.dtype == np.float32
    for q in range(b):
        want = ref_beam_search(ref, NarProposals(tokens[q], logp[q]), bw, theta_tok, theta_sent, alpha)
        assert_same(ids[q], scores[q], *want, bw)


@settings(max_examples=40, deadline=None)
@given(PARAMS)
def test_ar_matches_reference(params):
    seed, bw, theta_tok, theta_sent, alpha, ties = params
    rng = np.random.default_rng(seed)
    trie, ref = random_trie(rng, int(rng.integers(1, 120)))
    b, T, K = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 9))
    tokens, logp = random_tokens(rng, (T, b, bw, K)), random_logp(rng, (T, b, bw, K), ties)
    traces = [[] for _ in range(b)]
    wants = [ref_beam_search(ref, ArProposals(tokens[:, q], logp[:, q]), bw, theta_tok, theta_sent, alpha,
                             trace=traces[q]) for q in range(b)]
    stepper = TrieBeamStepper(trie, b, bw, theta_tok, theta_sent, alpha)
    for t in range(T):
        live = stepper.step(tokens[t], logp[t])
        assert live.nodes.shape == (b, bw) and np.all(live.count <= bw)
        for q in range(b):  # the live list itself, ties included: score desc, node id asc
            c = int(live.count[q])
            got = list(zip(live.nodes[q, :c].tolist(), live.scores[q, :c].tolist(), live.parents[q, :c].tolist(),
                           live.tokens[q, :c].tolist()))
            assert got == traces[q][t]
            assert np.all(live.nodes[q, c:] == -1) and np.all(np.isneginf(live.scores[q, c:]))
    ids, scores = stepper.result()
    for q in range(b):
        assert_same(ids[q], scores[q], *wants[q], bw)


def test_ar_with_shared_rows_equals_nar():
    rng = np.random.default_rng(7)
    trie, _ = random_trie(rng, 60)
    tokens, logp = random_tokens(rng, (2, 5, 6)), random_logp(rng, (2, 5, 6), False)
    want = trie_beam_search(trie, tokens, logp, 4, theta_tok=-2.0, alpha=1.0)
    stepper = TrieBeamStepper(trie, 2, 4, theta_tok=-2.0, alpha=1.0, max_steps=5)
    live = stepper.live
    assert live.nodes[:, 0].tolist() == [0, 0] and live.count.tolist() == [1, 1]
    for t in range(5):
        stepper.step(np.repeat(tokens[:, t:t + 1], 4, axis=1), np.repeat(logp[:, t:t + 1], 4, axis=1))
    assert stepper.done
    got = stepper.result()
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    with pytest.raises(GtmkitError, match="all 5 steps"):
        stepper.step(tokens[:, :1], logp[:, :1])


def test_parents_and_tokens_rebuild_prefixes():
    trie = SuccinctTrie.build([[1, 2, 3], [1, 4], [5, 6, 7], [5, 6]])
    stepper = TrieBeamStepper(trie, 1, 3)
    lp = np.log(np.float32([[[0.5, 0.3, 0.2]] * 3]))
    prefixes = [()]
    for toks in ([1, 5, 9], [2, 4, 6], [3, 7, 6]):
        live = stepper.step(np.array([[toks] * 3]), lp)
        c = int(live.count[0])
        prefixes = [prefixes[p] + (int(t),) for p, t in zip(live.parents[0, :c], live.tokens[0, :c])]
        assert [trie.node_of(p) for p in prefixes] == live.nodes[0, :c].tolist()
    ids, scores = stepper.result()
    assert [trie.key(int(k)) for k in ids[0] if k >= 0] == [(1, 4), (1, 2, 3), (5, 6)]  # .15, .125, .06


def test_worked_example_with_normalisation():
    trie = SuccinctTrie.build([[1], [1, 2], [1, 2, 3], [70000, 5]])
    tokens = np.array([[[1, 70000], [2, 5], [3, 9]]])
    logp = np.log(np.float32([[[0.6, 0.4], [0.5, 0.5], [0.9, 0.1]]]))
    ids, scores = trie_beam_search(trie, tokens, logp, 3, alpha=1.0)
    f = length_factors(1.0, 3)
    s1, s2 = np.float32(np.log(0.6)), np.float32(np.float32(np.log(0.6)) + np.float32(np.log(0.5)))
    s3 = np.float32(s2 + np.float32(np.log(0.9)))
    s_other = np.float32(np.float32(np.log(0.4)) + np.float32(np.log(0.5)))
    want = sorted([(s1 * f[1], (1,)), (s2 * f[2], (1, 2)), (s3 * f[3], (1, 2, 3)), (s_other * f[2], (70000, 5))],
                  reverse=True)[:3]
    assert [trie.key(int(k)) for k in ids[0]] == [k for _, k in want]
    np.testing.assert_allclose(scores[0], [s for s, _ in want], atol=1e-6)
    # theta_sent cuts every prefix whose sum is not above it; theta_tok every proposal not above it
    ids, _ = trie_beam_search(trie, tokens, logp, 3, theta_sent=float(s2))
    assert [trie.key(int(k)) for k in ids[0] if k >= 0] == [(1,)]
    ids, _ = trie_beam_search(trie, tokens, logp, 3, theta_tok=float(np.log(np.float32(0.5))))
    assert [trie.key(int(k)) for k in ids[0] if k >= 0] == [(1,)]


def test_repeated_tokens_keep_best_logp():
    trie = SuccinctTrie.build([[1], [2]])
    tokens = np.array([[[1, 2, 1, 1]]])
    logp = np.float32([[[-3.0, -2.0, -0.5, -1.0]]])
    ids, scores = trie_beam_search(trie, tokens, logp, 4)
    assert ids[0].tolist() == [0, 1, -1, -1] and scores[0, :2].tolist() == [-0.5, -2.0]


def test_edge_shapes():
    trie = SuccinctTrie.build([[1, 2]])
    ids, scores = trie_beam_search(trie, np.zeros((2, 0, 3), np.int32), np.zeros((2, 0, 3), np.float32), 2)
    assert ids.tolist() == [[-1, -1]] * 2 and np.all(np.isneginf(scores))
    ids, _ = trie_beam_search(trie, np.zeros((1, 2, 0), np.int32), np.zeros((1, 2, 0), np.float32), 1)
    assert ids.tolist() == [[-1]]
    ids, _ = trie_beam_search(trie, np.array([[[1], [2]]], np.uint64), np.array([[[np.nan], [0.0]]]), 1)
    assert ids.tolist() == [[-1]]  # a NaN log-prob is never above a threshold


@pytest.mark.parametrize("kwargs, message", [
    (dict(device="tpu"), "must be 'cpu', 'cuda' or 'auto'"),
    (dict(beam_width=0), "beam_width"),
    (dict(tokens=np.zeros((1, 2), np.int32)), "shapes"),
    (dict(tokens=np.zeros((1, 2, 3), np.float32)), "tokens must be integers"),
    (dict(logp=np.zeros((1, 2, 3), np.int32)), "logp must be floats"),
    (dict(theta_tok=float("nan")), "NaN"),
    (dict(trie="trie"), "SuccinctTrie"),
])
def test_bad_search_input(kwargs, message):
    args = dict(trie=SuccinctTrie.build([[1]]), tokens=np.zeros((1, 2, 3), np.int32),
                logp=np.zeros((1, 2, 3), np.float32), beam_width=2)
    args.update(kwargs)
    with pytest.raises(GtmkitError, match=message):
        trie_beam_search(**args)


def test_bad_stepper_input():
    trie = SuccinctTrie.build([[1]])
    with pytest.raises(GtmkitError, match="batch"):
        TrieBeamStepper(trie, 0, 2)
    stepper = TrieBeamStepper(trie, 2, 2)
    with pytest.raises(GtmkitError, match="need \\[2, R, K\\]"):
        stepper.step(np.zeros((1, 1, 3), np.int32), np.zeros((1, 1, 3), np.float32))
    with pytest.raises(GtmkitError, match="need \\[2, R, K\\]"):
        stepper.step(np.zeros((2, 3, 3), np.int32), np.zeros((2, 3, 3), np.float32))
