"""Tries with a tail store (trie/tails.py) against the plain-Python reference: keys built to have long single-child
chains, shared suffixes and wide tokens; lookup, keys, children, prefix enumeration, NAR and AR search; a trie
never grows with tails; hostile tail arrays are refused in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gtmkit.errors import ArtifactError
from gtmkit.trie.search import TrieBeamStepper, trie_beam_search
from gtmkit.trie.trie import SuccinctTrie
from gtmkit.testing.trie import ArProposals, NarProposals, RefTrie, ref_beam_search

from support.tries import assert_same, random_logp

SUFFIXES = [(0,), (7, 0), (70000, 3, 0), (5, 5, 5, 5, 9)]  # shared chain ends, one with a wide token


def chain_keys(rng, n_keys: int) -> list:
    """Short branching heads, then a long run of unique tokens and a shared suffix: single-child chains."""
    keys = []
    for _ in range(n_keys):
        head = [int(x) for x in rng.integers(0, 4, size=rng.integers(1, 3))]
        mid = [int(x) for x in rng.integers(0, 2**20, size=rng.integers(0, 4))]
        key = head + mid + list(SUFFIXES[int(rng.integers(0, len(SUFFIXES)))])
        keys.append(key[:int(rng.integers(1, len(key) + 1))] if rng.random() < 0.2 else key)
    return keys


def _trie(seed: int, n_keys: int):
    rng = np.random.default_rng(seed)
    keys = chain_keys(rng, n_keys)
    return rng, keys, SuccinctTrie.build(keys), RefTrie(keys)


def _proposals(rng, keys, shape):
    vocab = sorted({t for k in keys for t in k}) + [-1, 11]
    return rng.choice(vocab, size=shape)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 150))
def test_navigation_matches_reference(seed, n_keys):
    rng, keys, trie, ref = _trie(seed, n_keys)
    assert trie.nbytes <= SuccinctTrie.build(keys, tails=False).nbytes
    assert [trie.lookup(k) for k in keys] == [ref.lookup(k) for k in keys]
    assert [trie.key(i) for i in range(len(trie))] == [tuple(k) for k in ref.key_list]
    for node in range(len(ref.nodes)):
        labels, kids = trie.children(node)
        assert (list(labels), list(kids)) == tuple(ref.children(node))
    for k in keys[:10]:
        for cut in range(len(k) + 1):
            want = sorted(ref.lookup(x) for x in ref.key_list if tuple(x[:cut]) == tuple(k[:cut]))
            assert trie.keys_with_prefix(k[:cut]).tolist() == want


PARAMS = st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 6), st.sampled_from([-math.inf, -1.2]),
                   st.sampled_from([0.0, 0.7]), st.booleans())


@settings(max_examples=40, deadline=None)
@given(PARAMS)
def test_nar_search_matches_reference(params):
    seed, bw, theta_tok, alpha, ties = params
    rng, keys, trie, ref = _trie(seed, int(seed % 60) + 1)
    b, T, K = 2, 7, 6
    tokens, logp = _proposals(rng, keys, (b, T, K)), random_logp(rng, (b, T, K), ties)
    ids, scores = trie_beam_search(trie, tokens, logp, bw, theta_tok, -math.inf, alpha)
    for q in range(b):
        assert_same(ids[q], scores[q], *ref_beam_search(ref, NarProposals(tokens[q], logp[q]), bw, theta_tok,
                                                       -math.inf, alpha), bw)


@settings(max_examples=30, deadline=None)
@given(PARAMS)
def test_ar_search_matches_reference(params):
    seed, bw, theta_tok, alpha, ties = params
    rng, keys, trie, ref = _trie(seed, int(seed % 60) + 1)
    b, T, K = 2, 7, 5
    tokens, logp = _proposals(rng, keys, (T, b, bw, K)), random_logp(rng, (T, b, bw, K), ties)
    traces = [[] for _ in range(b)]
    wants = [ref_beam_search(ref, ArProposals(tokens[:, q], logp[:, q]), bw, theta_tok, -math.inf, alpha,
                             trace=traces[q]) for q in range(b)]
    stepper = TrieBeamStepper(trie, b, bw, theta_tok, -math.inf, alpha)
    for t in range(T):
        live = stepper.step(tokens[t], logp[t])
        for q in range(b):
            c = int(live.count[q])
            assert list(zip(live.nodes[q, :c].tolist(), live.scores[q, :c].tolist(), live.parents[q, :c].tolist(),
                            live.tokens[q, :c].tolist())) == traces[q][t]
    ids, scores = stepper.result()
    for q in range(b):
        assert_same(ids[q], scores[q], *wants[q], bw)


def test_tails_pay_on_shared_suffixes_and_stats_report_them():
    _, keys, trie, _ = _trie(1, 400)
    s = trie.stats()
    assert s["tail_nodes"] > 0 and 0 < s["link_nodes"] <= s["tail_nodes"] and s["tail_bytes"] > 0
    assert sum(s["structure_bytes"].values()) == trie.nbytes
    assert trie.nbytes < SuccinctTrie.build(keys, tails=False).nbytes


def _edit(arrays: dict, name: str) -> None:
    if name == "label_tail":
        arrays[name][0] ^= np.uint64(1 << 5)
    elif name == "tail_dict":
        arrays[name][-1] = arrays[name][0]
    elif name == "tail_low":
        arrays[name][:] = np.uint64(2**64 - 1)
    elif name == "label_tail_rank":
        arrays[name][-1, 0] += np.uint64(1)


@pytest.mark.parametrize("name", ["label_tail", "tail_dict", "tail_low", "label_tail_rank"])
def test_hostile_tail_arrays_are_refused_in_one_line(tmp_path, name):
    _, _, trie, _ = _trie(1, 400)
    trie.save(tmp_path / "t")
    version = tmp_path / "t" / (tmp_path / "t" / "CURRENT").read_text().strip()
    arrays = {f.stem: np.load(f) for f in version.glob("*.npy")}
    _edit(arrays, name)
    np.save(version / f"{name}.npy", arrays[name])
    # the checksums catch the edit first; with them recomputed, the full check must name the array
    with pytest.raises(ArtifactError) as e:
        SuccinctTrie.load(tmp_path / "t")
    assert "\n" not in str(e.value)
    from gtmkit.artifact.trie_checks import trie_problems
    import json
    man = json.loads((version / "manifest.json").read_text())
    problems = list(trie_problems(tmp_path / "t", man, arrays, full=True))
    assert problems and all("\n" not in p for p in problems)
