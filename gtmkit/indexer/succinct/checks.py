"""What SuccinctTrie.load accepts: the manifest against the arrays' shapes (always), and with full=True the
invariants the trie search relies on (gtmkit/matcher/succinct/search_*.py, via gtmkit/indexer/succinct/nav.py):
a LOUDS vector that encodes one tree with children numbered after their parent, rank and select directories
equal to the ones the bit vectors give, labels strictly increasing among siblings, level offsets equal to the
tree's breadth-first levels, and terminal flags set on every leaf and never on the root.

trie_problems yields one line per problem; the full stage runs only when the shapes are right, and the
select samples are recomputed only from a rank directory already found equal to its bit vector's."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from .bits import SAMPLE, rank_directory, select_samples, words_for
from .format import MAX_NODES
from ...formats.array_checks import FieldError, field, increasing_within


def expected_shapes(n: int, m: int, hb: int) -> dict:
    n_l, n_t = words_for(2 * n + 1), words_for(n)
    return {
        "louds": ("<u8", (n_l,)), "louds_rank": ("<u8", ((n_l + 7) // 8 + 1, 2)),
        "louds_select0": ("<u4", (-(-(n + 1) // SAMPLE) + 1,)), "louds_select1": ("<u4", (-(-n // SAMPLE) + 1,)),
        "label_low": ("<u2", (n - 1,)), "label_high": ("<u8", (((n - 1) * hb >> 6) + 1,)),
        "terminal": ("<u8", (n_t,)), "terminal_rank": ("<u8", ((n_t + 7) // 8 + 1, 2)),
        "terminal_select1": ("<u4", (-(-m // SAMPLE) + 1,)),
    }


def manifest_counts(man: dict) -> tuple:
    """(num_nodes, num_keys, high_bits, max_depth), each checked; FieldError names a bad one."""
    n = field(man, "num_nodes", "", int, 2, MAX_NODES)
    m, depth = field(man, "num_keys", "", int, 1), field(man, "max_depth", "", int, 1)
    if m >= n or depth >= n:
        raise FieldError(f"num_keys {m} and max_depth {depth} must be below num_nodes {n}")
    return n, m, field(man, "high_bits", "", int, 0, 15), depth


def shape_problems(path: Path, a: dict, n: int, m: int, hb: int, depth: int) -> Iterator[str]:
    for name, (dt, shape) in expected_shapes(n, m, hb).items():
        if a[name].dtype.str != dt or a[name].shape != shape:
            yield (f"{path}: array {name} is {a[name].dtype.str} {list(a[name].shape)}, "
                   f"expected {dt} {list(shape)} for num_nodes {n}, num_keys {m}, high_bits {hb}")
    lo = a["level_offsets"]
    if lo.dtype.str != "<i8" or lo.shape != (depth + 2,) or lo[0] != 0 or lo[-1] != n:
        yield f"{path}: array level_offsets is not {depth + 2} int64 from 0 to num_nodes {n} (max_depth {depth})"
    elif int(a["louds_rank"][-1, 0]) != n or int(a["terminal_rank"][-1, 0]) != m:
        yield f"{path}: louds_rank / terminal_rank end at {int(a['louds_rank'][-1, 0])} / " \
              f"{int(a['terminal_rank'][-1, 0])} ones, not num_nodes {n} / num_keys {m}"


def _bits(words: np.ndarray) -> np.ndarray:
    return np.unpackbits(np.ascontiguousarray(words).view(np.uint8), bitorder="little").view(np.bool_)


def _labels(a: dict, n: int, hb: int) -> np.ndarray:
    """int64 [n-1]: label of node j+1 = label_low | (hb-bit field j of label_high) << 16."""
    low = np.asarray(a["label_low"], np.int64)
    if hb == 0:
        return low
    words = np.asarray(a["label_high"], np.uint64)
    p = np.arange(n - 1, dtype=np.int64) * hb
    w, off = p >> 6, (p & 63).astype(np.uint64)
    straddle = off + np.uint64(hb) > 64  # the field continues in the next word
    nxt = words[np.minimum(w + 1, len(words) - 1)] << np.where(straddle, np.uint64(64) - off, np.uint64(0))
    v = (words[w] >> off) | np.where(straddle, nxt, np.uint64(0))
    return low | ((v & np.uint64((1 << hb) - 1)).astype(np.int64) << 16)


def _tree_problems(path: Path, a: dict, n: int) -> Iterator[str]:
    """LOUDS: '10', then per node a run of ones (its children) and a zero. Node v's children are ids
    c[v] .. c[v+1]-1 with c[v] = ones before zero v; one tree with BFS ids iff c[v] > v for every node."""
    bits = _bits(a["louds"])
    if bits[2 * n + 1:].any() or int(bits[:2 * n + 1].sum()) != n:
        yield f"{path / 'louds.npy'}: does not hold {n} ones in its first {2 * n + 1} bits and zeros after"
        return
    zeros = np.flatnonzero(~bits[:2 * n + 1])
    c = zeros - np.arange(n + 1)
    if c[0] != 1 or c[n] != n or np.any(c[:n] <= np.arange(n)):
        v = int(np.flatnonzero(c[:n] <= np.arange(n))[0]) if c[0] == 1 else 0
        yield f"{path / 'louds.npy'}: not a tree in breadth-first order (node {v} would have children numbered {int(c[v])}..)"
        return
    lo = np.asarray(a["level_offsets"], np.int64)
    if np.any(np.diff(lo) <= 0) or not np.array_equal(c[lo[:-1]], lo[1:]):
        yield f"{path / 'level_offsets.npy'}: {lo.tolist()} are not the tree's breadth-first levels"
    yield from _labels_problems(path, a, n, c)
    term = _bits(a["terminal"])
    leaf = c[1:] == c[:-1]
    if term[n:].any() or term[0] or np.any(leaf & ~term[:n]):
        yield f"{path / 'terminal.npy'}: a leaf is not terminal, the root is, or bits past node {n - 1} are set"


def _labels_problems(path: Path, a: dict, n: int, c: np.ndarray) -> Iterator[str]:
    hb = int(a["high_bits"])
    high_words = _bits(a["label_high"])
    if high_words[(n - 1) * hb:].any():
        yield f"{path / 'label_high.npy'}: bits past the last label are set"
        return
    labels = _labels(a, n, hb)
    if (int(labels.max()) >> 16).bit_length() != hb:
        yield f"{path / 'manifest.json'}: high_bits {hb} is not the width of the largest label's high part"
    p = increasing_within(labels, c - 1)
    if p:
        yield f"{path / 'label_low.npy'}: labels {p.replace('segment', 'the children of node')}"


def _directory_problems(path: Path, a: dict, n: int, m: int) -> Iterator[str]:
    for vec, selects in (("louds", (("louds_select0", n + 1, True), ("louds_select1", n, False))),
                         ("terminal", (("terminal_select1", m, False),))):
        words = np.ascontiguousarray(a[vec])
        rd = rank_directory(words)
        if not np.array_equal(rd, a[f"{vec}_rank"]):
            yield f"{path / (vec + '_rank.npy')}: rank directory differs from the one of {vec}.npy"
            continue
        for name, total, zeros in selects:
            if not np.array_equal(select_samples(rd, len(words), total, zeros), a[name]):
                yield f"{path / (name + '.npy')}: select samples differ from the ones of {vec}.npy"


def trie_problems(path, man: dict, arrays: dict, full: bool) -> Iterator[str]:
    """One line per problem of a gtmkit-trie artifact's manifest and arrays (see the module docstring)."""
    path = Path(path)
    try:
        n, m, hb, depth = manifest_counts(man)
    except FieldError as e:
        yield f"{path / 'manifest.json'}: {e}"
        return
    stage = list(shape_problems(path, arrays, n, m, hb, depth))
    yield from stage
    if stage or not full:
        return
    a = dict(arrays, high_bits=hb)
    tree = list(_tree_problems(path, a, n))
    yield from tree
    if not tree:
        yield from _directory_problems(path, a, n, m)
