"""Trie keys drawn as parts by several processes: no two parts share a key, each part's first tokens lie in
its residue class, the Zipf first token of the whole matches the one-file draw, the bytes do not depend on the
number of workers, and the trie built from the folder holds exactly the union."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow.dataset as ds
import pytest

import gtmkit
from gtmkit.errors import GtmkitError
from gtmkit.synth.keys import class_shares, part_sizes, synth_keys, write_keys

N, V = 40_000, 5_000


def _keys(folder) -> list:
    return [tuple(k) for k in ds.dataset(folder).to_table().column("key").to_pylist()]


def test_parts_are_distinct_classes_of_the_zipf_draw(tmp_path):
    s2 = write_keys(tmp_path / "k2", N, seed=3, vocab=V, parts=4, workers=2)
    s1 = write_keys(tmp_path / "k1", N, seed=3, vocab=V, parts=4, workers=1)
    assert s1 == {**s2, "path": str(tmp_path / "k1")} and s2["parts"] == 4
    digest = [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((tmp_path / "k2").iterdir())]
    assert digest == [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((tmp_path / "k1").iterdir())]
    keys = _keys(tmp_path / "k2")
    assert len(keys) == N == len(set(keys))
    sizes = part_sizes(N, V, 4)
    assert sizes.sum() == N and np.allclose(sizes / N, class_shares(V, 4), atol=1e-3)
    for i, part in enumerate(sorted((tmp_path / "k2").iterdir())):
        firsts = np.array([k[0] for k in _keys(part)])
        assert len(firsts) == sizes[i] and np.all(firsts % 4 == i)
    one = synth_keys(N, seed=3, vocab=V, as_arrow=False)
    first_one = one[0][one[1][:-1]]
    first_parts = np.array([k[0] for k in keys])
    for r in range(5):  # the head of the Zipf law, as often in both draws
        assert abs(np.mean(first_one == r) - np.mean(first_parts == r)) < 0.01
    trie = gtmkit.SuccinctTrie.build(ds.dataset(tmp_path / "k2").to_table().column("key"))
    assert trie.stats()["keys"] == N and trie.lookup(list(keys[123])) is not None


def test_one_part_is_the_one_file_draw_and_bad_counts_are_refused(tmp_path):
    a = synth_keys(500, seed=9, vocab=V, as_arrow=False)
    b = synth_keys(500, seed=9, vocab=V, as_arrow=False, part=0, parts=1)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    for kw, text in ((dict(parts=0), "parts"), (dict(workers=0), "workers"), (dict(parts=V + 1), "parts")):
        with pytest.raises(GtmkitError, match=text):
            write_keys(tmp_path / "bad", 100, vocab=V, **kw)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep")
    with pytest.raises(GtmkitError, match="not an empty directory"):
        write_keys(tmp_path / "full", 100, vocab=V, parts=2)
    assert (tmp_path / "full" / "x").read_text() == "keep"


def test_a_parts_first_tokens_follow_the_zipf_law_restricted_to_its_class():
    """Part p's first tokens are the Zipf ranks with rank % parts == p, in proportion to their probabilities."""
    from gtmkit.synth.keys import _class_ranks, _rank_pmf
    vocab, parts, part, n = 1000, 4, 1, 400_000
    got = _class_ranks(np.random.default_rng(0), n, vocab, 1.0, part, parts)
    assert np.all(got % parts == part) and got.min() >= 0 and got.max() < vocab
    pmf = _rank_pmf(vocab, 1.0)[part::parts]
    want = pmf / pmf.sum() * n
    seen = np.bincount(got // parts, minlength=len(pmf))
    top = want > 2000  # the frequent ranks, each within 5 standard deviations
    assert top.sum() >= 5 and np.all(np.abs(seen[top] - want[top]) < 5 * np.sqrt(want[top]))
