"""Tries with 8-bit label_low and constant deepest levels (trie/labels.py) against the plain-Python reference:
SID-like keys of small codes with a shared trailing code, some also with tail chains; lookup, keys, children, NAR
search; a trie never grows against the format-2 layout; hostile label arrays are refused in one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gtmkit.artifact.trie_checks import trie_problems
from gtmkit.errors import ArtifactError
from gtmkit.trie.search import trie_beam_search
from gtmkit.trie.trie import SuccinctTrie
from gtmkit.testing.trie import NarProposals, RefTrie, ref_beam_search

from support.tries import assert_same, random_logp


def sid_keys(rng, n_keys: int, codebook: int, trailing: tuple) -> list:
    """Fixed-length keys of codes below codebook, then the same trailing tokens on every key."""
    width = int(rng.integers(1, 4))
    return [[int(x) for x in rng.integers(0, codebook, size=width)] + list(trailing) for _ in range(n_keys)]


def _trie(seed: int, n_keys: int):
    rng = np.random.default_rng(seed)
    trailing = [(), (0,), (0, 0), (300, 7)][seed % 4]
    keys = sid_keys(rng, n_keys, [4, 200, 256, 4000][seed // 4 % 4], trailing)
    return rng, keys, SuccinctTrie.build(keys), RefTrie(keys)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 200))
def test_navigation_and_search_match_reference(seed, n_keys):
    rng, keys, trie, ref = _trie(seed, n_keys)
    assert trie.nbytes <= SuccinctTrie.build(keys, tails=False).nbytes
    assert [trie.lookup(k) for k in keys] == [ref.lookup(k) for k in keys]
    assert [trie.key(i) for i in range(len(trie))] == [tuple(k) for k in ref.key_list]
    for node in range(len(ref.nodes)):
        labels, kids = trie.children(node)
        assert (list(labels), list(kids)) == tuple(ref.children(node))
    vocab = sorted({t for k in keys for t in k}) + [-1, 11]
    tokens, logp = rng.choice(vocab, size=(2, 6, 5)), random_logp(rng, (2, 6, 5), seed % 2 == 0)
    ids, scores = trie_beam_search(trie, tokens, logp, 4, -math.inf, -math.inf, 0.0)
    for q in range(2):
        assert_same(ids[q], scores[q], *ref_beam_search(ref, NarProposals(tokens[q], logp[q]), 4, -math.inf,
                                                       -math.inf, 0.0), 4)


def test_sid_keys_take_8_bit_labels_and_a_constant_level(tmp_path):
    _, keys, trie, ref = _trie(5, 3000)  # codes below 200, trailing 0
    s = trie.stats()
    assert s["low_bits"] == 8 and s["const_levels"] == 1 and s["const_nodes"] == len(trie)
    assert trie.arrays.label_low.dtype == np.uint8
    trie.save(tmp_path / "t")
    back = SuccinctTrie.load(tmp_path / "t")
    assert [back.lookup(k) for k in keys] == [ref.lookup(k) for k in keys]


@pytest.mark.parametrize("edit", ["level_label", "low_bits", "const_levels"])
def test_hostile_label_fields_are_refused_in_one_line(tmp_path, edit):
    _, _, trie, _ = _trie(5, 3000)
    trie.save(tmp_path / "t")
    version = tmp_path / "t" / (tmp_path / "t" / "CURRENT").read_text().strip()
    arrays = {f.stem: np.load(f) for f in version.glob("*.npy")}
    man = json.loads((version / "manifest.json").read_text())
    if edit == "level_label":
        arrays["level_label"][0] = 1 << 20  # a constant level's token above its siblings' order is not caught: a
        arrays["level_label"] = np.append(arrays["level_label"], np.int32(3))  # wrong count is
        np.save(version / "level_label.npy", arrays["level_label"])
    else:
        man[edit] = {"low_bits": 12, "const_levels": 5}[edit]
    problems = list(trie_problems(tmp_path / "t", man, arrays, full=True))
    assert problems and all("\n" not in p for p in problems)
    if edit == "level_label":
        with pytest.raises(ArtifactError) as e:
            SuccinctTrie.load(tmp_path / "t")
        assert "\n" not in str(e.value)
