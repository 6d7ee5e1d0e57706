"""The dense child bitmaps the GPU step's expand reads (gtmkit/matcher/child_bits.py), against the CSR
trie they are derived from."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gtmkit.matcher.child_bits import dense_child_bits, dense_levels_end


def _csr(rng, level_sizes, vocab, fanout):
    """A level-ordered CSR trie: node_offsets, child_tokens, level_offsets; each internal node gets up to
    `fanout` distinct sorted child tokens below vocab."""
    degs, tokens = [], []
    for n_level in level_sizes[:-1]:
        for _ in range(n_level):
            d = int(rng.integers(0, min(fanout, vocab) + 1))
            degs.append(d)
            tokens.append(np.sort(rng.choice(vocab, size=d, replace=False)))
    node_offsets = np.concatenate([[0], np.cumsum(degs)]).astype(np.int64)
    level_offsets = np.concatenate([[0], np.cumsum(level_sizes)]).astype(np.int64)
    return node_offsets, np.concatenate(tokens).astype(np.int32) if tokens else np.zeros(0, np.int32), level_offsets


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), vocab=st.sampled_from([1, 9, 31, 32, 33, 64, 100, 1100]),
       fanout=st.integers(0, 40))
def test_bits_are_the_children(seed, vocab, fanout):
    rng = np.random.default_rng(seed)
    n_internal = int(rng.integers(1, 30))
    node_offsets, child_tokens, _ = _csr(rng, [n_internal, 1], vocab, fanout)
    n_dense = int(rng.integers(0, n_internal + 1))
    bits = dense_child_bits(node_offsets, child_tokens, n_dense, vocab)
    assert bits.shape == (n_dense, -(-vocab // 32)) and bits.dtype == np.uint32
    for n in range(n_dense):
        want = set(child_tokens[node_offsets[n]:node_offsets[n + 1]].tolist())
        got = {w * 32 + b for w in range(bits.shape[1]) for b in range(32) if (int(bits[n, w]) >> b) & 1}
        assert got == want
        # a child's CSR position is the number of set bits below its token (what the kernel computes)
        for c, tok in enumerate(child_tokens[node_offsets[n]:node_offsets[n + 1]]):
            w, b = divmod(int(tok), 32)
            below = sum(bin(int(x)).count("1") for x in bits[n, :w]) + bin(int(bits[n, w]) & ((1 << b) - 1)).count("1")
            assert below == c


def test_tokens_outside_the_vocabulary_are_refused():
    with pytest.raises(ValueError, match="outside"):
        dense_child_bits(np.array([0, 2], np.int64), np.array([3, 9], np.int32), 1, 9)


def test_dense_levels_stop_at_the_first_sparse_level_or_the_byte_cap():
    rng = np.random.default_rng(0)
    # root with 64 children over vocab 64 (dense), level 1: 64 nodes with 0..40 children (mean ~20 >= 2: dense),
    # level 2: fanout 1 (mean < 64 / 32: sparse), leaves
    degs = [64] + list(rng.integers(0, 41, size=64))
    n2 = int(sum(degs[1:]))
    degs += [1] * n2
    node_offsets = np.concatenate([[0], np.cumsum(degs)]).astype(np.int64)
    sizes = [1, 64, n2, n2]
    level_offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    words = 2
    assert dense_levels_end(node_offsets, level_offsets, 64, 1 << 30) == 65
    assert dense_levels_end(node_offsets, level_offsets, 64, 65 * words * 4 - 1) == 1  # level 1 past the cap
    assert dense_levels_end(node_offsets, level_offsets, 64, 7) == 0                   # not even the root
    # a root of one child over 64 tokens is already sparse: nothing is dense
    one = np.array([0, 1, 2, 3], np.int64)
    assert dense_levels_end(one, np.array([0, 1, 2, 3, 4], np.int64), 64, 1 << 30) == 0
