"""numba kernel of the CPU matcher's node recovery: the trie node each row's token prefix leads to."""

from __future__ import annotations

from numba import prange

from ..._bits import lower_bound
from ...threads import parallel_njit


@parallel_njit(cache=True)
def prefix_nodes_kernel(node_offsets, child_tokens, tokens, start, depth, offsets, vocab, out):
    """out[r] = node reached from the root by tokens[r, start + j] - offsets[j], j < depth; -1 when a token
    is outside [0, vocab) or not a child of the node so far (an invalid prefix)."""
    n_internal = node_offsets.shape[0] - 1
    for r in prange(tokens.shape[0]):
        n = 0
        for j in range(depth):
            tok = tokens[r, start + j] - offsets[j]
            if tok < 0 or tok >= vocab or n >= n_internal:
                n = -1
                break
            end = node_offsets[n + 1]  # children of n: CSR slots node_offsets[n]..end-1, sorted tokens
            j = lower_bound(child_tokens, node_offsets[n], end, tok)
            if j == end or child_tokens[j] != tok:
                n = -1
                break
            n = j + 1  # slot j holds node j + 1 (BFS ids, docs/design.md §3)
        out[r] = n
