"""Dense child bitmaps for the GPU step's expand: bit t of node n's row says that n has a child with
token t. Derived from the CSR trie when it is uploaded (no artifact change).

Why: on the dense upper levels (a 10M-SID index with V = 512 has ~84 children a row at depth 3, up to
512) the expand walking a row's CSR children loads their tokens and then gathers the log-probs they
name, two dependent loads a pass and up to four passes a row, so a request whose beams sit on popular
prefixes waits several times longer than the median one. With the bitmap a warp reads the row's V
log-probs in one coalesced pass beside the row's bits, whatever its degree; a child's position in
the CSR list (children are sorted by token) is the number of set bits below its token."""

from __future__ import annotations

import numpy as np

# the bitmaps may take this share of the index's device bytes (levels past it keep the CSR walk)
DENSE_SHARE = 8


def dense_levels_end(node_offsets: np.ndarray, level_offsets: np.ndarray, vocab: int, max_bytes: int) -> int:
    """The first node id past the dense levels: levels from the root on, as long as each has on average
    at least one child per 32 tokens (a warp's 32 lanes then hold a child, and the bitmap is no larger
    than the token list) and the bitmaps of all of them fit in max_bytes."""
    words = -(-int(vocab) // 32)
    n_internal = len(node_offsets) - 1
    end = 0
    for lo, hi in zip(level_offsets[:-1], level_offsets[1:]):
        lo, hi = int(lo), min(int(hi), n_internal)
        if hi <= lo or lo != end:
            break
        children = int(node_offsets[hi] - node_offsets[lo])
        if children * 32 < (hi - lo) * vocab or hi * words * 4 > max_bytes:
            break
        end = hi
    return end


def dense_child_bits(node_offsets: np.ndarray, child_tokens: np.ndarray, n_dense: int, vocab: int) -> np.ndarray:
    """uint32 [n_dense, ceil(vocab / 32)]: bit (t & 31) of word t >> 5 of row n is set iff node n has a
    child with token t."""
    words = -(-int(vocab) // 32)
    node_offsets = np.asarray(node_offsets, np.int64)
    if n_dense == 0:
        return np.zeros((0, words), np.uint32)
    tok = np.asarray(child_tokens[: node_offsets[n_dense]], np.int64)
    if len(tok) and (tok.min() < 0 or tok.max() >= vocab):
        raise ValueError(f"child tokens outside [0, {vocab})")
    parent = np.repeat(np.arange(n_dense, dtype=np.int64), np.diff(node_offsets[: n_dense + 1]))
    # a node's children have distinct tokens, so the sum of their bits is their OR (exact in float64)
    bits = np.bincount(parent * words + (tok >> 5), weights=np.ldexp(1.0, (tok & 31).astype(np.int32)), minlength=n_dense * words)
    return bits.astype(np.uint32).reshape(n_dense, words)
