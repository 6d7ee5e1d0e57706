"""Succinct-trie beam search (CPU) on hostile inputs: non-finite log-probs and out-of-range tokens ranked or
dropped exactly as the plain-Python reference does; bad widths, batches, alphas, shapes and dtypes refused
with one-line errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gtmkit.errors import GtmkitError
from gtmkit.trie.trie import SuccinctTrie
from gtmkit.trie.search import TrieBeamStepper, trie_beam_search
from gtmkit.testing.trie import ArProposals, NarProposals, ref_beam_search

from support.tries import assert_same, random_tokens, random_trie

WEIRD = np.float32([np.nan, np.inf, -np.inf, 3e38, -3e38, -0.5, -1.0])
ODD_TOKENS = [-1, -2**40, 2**31, 2**40]


def hostile(rng, shape):
    """Log-probs with NaN, +-inf and values whose sums overflow; tokens with ids past the label range."""
    logp = np.log(rng.random(shape) + 1e-6).astype(np.float32)
    odd = rng.random(shape) < 0.35
    logp[odd] = rng.choice(WEIRD, odd.sum())
    tokens = random_tokens(rng, shape).astype(np.int64)
    far = rng.random(shape) < 0.1
    tokens[far] = rng.choice(ODD_TOKENS, far.sum())
    return tokens, logp


CASE = st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 5), st.sampled_from([-math.inf, -1.0]),
                 st.sampled_from([-math.inf, -2.0]), st.sampled_from([0.0, 0.7, -1.5]))


@settings(max_examples=60, deadline=None)
@given(CASE)
def test_nar_and_ar_equal_reference_on_non_finite_log_probs(case):
    seed, bw, theta_tok, theta_sent, alpha = case
    rng = np.random.default_rng(seed)
    trie, ref = random_trie(rng, int(rng.integers(1, 60)))
    b, T, K = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 7))
    tokens, logp = hostile(rng, (b, T, K))
    ids, scores = trie_beam_search(trie, tokens, logp, bw, theta_tok, theta_sent, alpha)
    for q in range(b):
        assert_same(ids[q], scores[q], *ref_beam_search(ref, NarProposals(tokens[q], logp[q]), bw, theta_tok,
                                                        theta_sent, alpha), bw)
    tokens, logp = hostile(rng, (T, b, bw, K))
    stepper = TrieBeamStepper(trie, b, bw, theta_tok, theta_sent, alpha)
    for t in range(T):
        stepper.step(tokens[t], logp[t])
    ids, scores = stepper.result()
    for q in range(b):
        assert_same(ids[q], scores[q], *ref_beam_search(ref, ArProposals(tokens[:, q], logp[:, q]), bw, theta_tok,
                                                        theta_sent, alpha), bw)


def test_plus_inf_ranks_first_and_nan_is_dropped():
    trie = SuccinctTrie.build([[1, 2], [1, 3], [4, 5]])
    tokens = np.array([[[1, 4], [2, 3]]])
    ids, scores = trie_beam_search(trie, tokens, np.float32([[[np.inf, -1.0], [np.nan, -2.0]]]), 3)
    assert [trie.key(int(k)) for k in ids[0] if k >= 0] == [(1, 3)] and scores[0, 0] == np.inf
    # every sum +inf: ties by key id
    ids, scores = trie_beam_search(trie, np.array([[[1, 4], [2, 3]], [[4, 1], [5, 2]]]),
                                   np.full((2, 2, 2), np.inf, np.float32), 3)
    assert ids[0].tolist() == [trie.lookup([1, 2]), trie.lookup([1, 3]), -1] and np.isposinf(scores[0, :2]).all()
    assert ids[1].tolist()[:3] == sorted([trie.lookup([1, 2]), trie.lookup([4, 5])]) + [-1]


def test_token_forms_past_the_label_range_match_nothing():
    trie = SuccinctTrie.build([[0, 1], [2**31 - 1, 0]])
    lp = np.zeros((1, 2, 2), np.float32)
    want = trie_beam_search(trie, np.array([[[0, -1], [1, -1]]]), lp, 2)
    for far in (np.uint64(2**64 - 1), np.uint64(2**31), np.int64(-2**63), np.int64(2**31)):
        toks = np.array([[[0, far], [1, far]]], dtype=np.asarray(far).dtype)
        got = trie_beam_search(trie, toks, lp, 2)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def one_line(fn):
    with pytest.raises(GtmkitError) as e:
        fn()
    assert "\n" not in str(e.value)
    return str(e.value)


def test_argument_errors():
    trie = SuccinctTrie.build([[1, 2], [3]])
    tok, lp = np.ones((1, 2, 2), np.int64), np.zeros((1, 2, 2), np.float32)
    for bw in (0, -1, 2.5, True, "3", None, np.float64(2)):
        assert "beam_width" in one_line(lambda: trie_beam_search(trie, tok, lp, bw))
        assert "beam_width" in one_line(lambda: TrieBeamStepper(trie, 1, bw))
    assert "b = 0" in one_line(lambda: trie_beam_search(trie, tok[:0], lp[:0], 2))
    for alpha in (1e4, -1e4, math.inf, -math.inf, math.nan, "x"):
        assert "alpha" in one_line(lambda: trie_beam_search(trie, tok, lp, 2, alpha=alpha))
        assert "alpha" in one_line(lambda: TrieBeamStepper(trie, 1, 2, alpha=alpha, max_steps=200))
    assert "theta_tok" in one_line(lambda: trie_beam_search(trie, tok, lp, 2, theta_tok=math.nan))
    for t, p in ((tok.astype(float), lp), (tok, lp.astype(np.int64)), (tok[0], lp[0]), (tok, lp[:, :1]),
                 (np.array([[[2**64]]], dtype=object), np.zeros((1, 1, 1))), ("ab", "cd")):
        one_line(lambda: trie_beam_search(trie, t, p, 2))
    stepper = TrieBeamStepper(trie, 2, 2, max_steps=1)
    for t, p in ((tok, lp), (np.ones((2, 3, 2), np.int64), np.zeros((2, 3, 2), np.float32)),
                 (np.ones((2, 1, 2), float), np.zeros((2, 1, 2)))):
        one_line(lambda: stepper.step(t, p))
    stepper.step(np.ones((2, 1, 2), np.int64), np.zeros((2, 1, 2), np.float32))
    assert "steps" in one_line(lambda: stepper.step(np.ones((2, 1, 2), np.int64), np.zeros((2, 1, 2))))
    for bad in (0, -3, 2.5, True, "2"):
        assert "max_steps" in one_line(lambda: TrieBeamStepper(trie, 1, 2, max_steps=bad))
    for bad in (0, 2.5, True):
        assert "batch" in one_line(lambda: TrieBeamStepper(trie, bad, 2))
