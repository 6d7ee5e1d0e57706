"""What SuccinctTrie.load accepts: the manifest against the arrays' shapes (always), and with full=True the
invariants the trie search relies on (gtmkit/trie/search_*.py, via gtmkit/trie/nav.py):
a LOUDS vector that encodes one tree with children numbered after their parent, rank and select directories
equal to the ones the bit vectors give, labels strictly increasing among siblings, level offsets equal to the
tree's breadth-first levels, and terminal flags set on every leaf and never on the root.

trie_problems yields one line per problem; the full stage runs only when the shapes are right, and the
select samples are recomputed only from a rank directory already found equal to its bit vector's."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from .._rank_select import SAMPLE, rank_directory, select_samples, words_for
from .trie_format import MAX_NODES
from .array_checks import FieldError, field


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


BLOCK_WORDS = 1 << 18  # LOUDS words a pass holds at once (16M bits): a billion-key trie checks in bounded memory


def _bits(words: np.ndarray) -> np.ndarray:
    return np.unpackbits(np.ascontiguousarray(words).view(np.uint8), bitorder="little").view(np.bool_)


def _tail_set(words, nbits: int) -> bool:
    """Any bit at or past nbits set in the LSB-first words?"""
    w, b = nbits >> 6, nbits & 63
    if w >= len(words):
        return False
    first = int(words[w]) >> b
    return bool(first) or bool(np.any(np.asarray(words[w + 1:])))


def _labels(a: dict, lo: int, hi: int, hb: int) -> np.ndarray:
    """int64 [hi-lo]: labels of entries lo..hi-1 (entry j: node j+1) = label_low | (hb-bit field j) << 16."""
    low = np.asarray(a["label_low"][lo:hi], np.int64)
    if hb == 0:
        return low
    words = a["label_high"]
    p = np.arange(lo, hi, dtype=np.int64) * hb
    w, off = p >> 6, (p & 63).astype(np.uint64)
    first = np.asarray(words[w[0]:w[-1] + 2] if len(w) else words[:0], np.uint64)
    w = w - (w[0] if len(w) else 0)
    straddle = off + np.uint64(hb) > 64  # the field continues in the next word
    nxt = first[np.minimum(w + 1, len(first) - 1)] << np.where(straddle, np.uint64(64) - off, np.uint64(0))
    v = (first[w] >> off) | np.where(straddle, nxt, np.uint64(0))
    return low | ((v & np.uint64((1 << hb) - 1)).astype(np.int64) << 16)


class _Walk:
    """One pass over the LOUDS bits in blocks (node ids from running counts), gathering the first failure of each
    check. The LOUDS bits: '10', then per node a run of ones (its children) and a zero. The zero of node v sits at
    z[v]; its children are ids c[v] .. c[v+1]-1 with c[v] = z[v] - v, one tree with BFS ids iff c[v] > v for every
    node. The one-bit of node j (j >= 1) follows a zero iff j is its parent's first child; its parent is the number
    of zeros before it, less the super-root's. Node v is a leaf iff the bit after its zero is a zero."""

    def __init__(self, a: dict, n: int, hb: int):
        self.a, self.n, self.hb = a, n, hb
        self.tree = self.level = self.order = self.leaf = None
        self.max_label = 0
        self.ones = 0

    def run(self) -> None:
        a, n = self.a, self.n
        words = a["louds"]
        total = 2 * n + 1
        lo = np.asarray(a["level_offsets"], np.int64)
        at_level = {int(v): int(w) for v, w in zip(lo[:-1], lo[1:])}
        zc = oc = 0          # zeros and ones before the block
        prev_bit = True      # the bit before bit 0: none, so bit 0's one starts no sibling run
        pend = None          # a node whose zero ended the last block: its leaf test waits for the next bit
        last_label = None    # (entry, label, its one's position) of the last node of the previous block
        term = a["terminal"]
        for w0 in range(0, words_for(total - 1), BLOCK_WORDS):
            bits = _bits(words[w0:w0 + BLOCK_WORDS])
            p0 = w0 << 6
            bits = bits[:max(0, min(len(bits), total - p0))]
            if not len(bits):
                break
            zeros = np.flatnonzero(~bits)
            ones = np.flatnonzero(bits)
            self.ones += len(ones)
            v = zc + np.arange(len(zeros), dtype=np.int64)
            keep = v <= n
            z, v = zeros[keep] + p0, v[keep]
            c = z - v
            if self.tree is None:
                self._tree(v, c)
            at = np.isin(v, lo[:-1])
            if self.level is None and any(at_level[int(x)] != int(y) for x, y in zip(v[at], c[at])):
                self.level = True
            # leaves: the bit after each zero (a zero that ends the block waits for the next block's first bit)
            if pend is not None:
                self._leaf(np.array([pend]), np.array([not bits[0]]), term)
                pend = None
            zl = zeros[keep]
            inner = (zl < len(bits) - 1) & (v < n)
            self._leaf(v[inner], ~bits[zl[inner] + 1], term)
            if len(v) and zl[-1] == len(bits) - 1 and v[-1] < n:
                pend = int(v[-1])
            # labels: node j's one at position p; entry j - 1
            j = oc + np.arange(len(ones), dtype=np.int64)
            before = np.concatenate([[prev_bit], bits[:-1]])[ones]
            sel = j >= 1
            if sel.any() and j[sel][-1] <= n - 1:
                js, ps, first = j[sel], ones[sel] + p0, ~before[sel]
                lab = _labels(a, int(js[0]) - 1, int(js[-1]), self.hb)
                self.max_label = max(self.max_label, int(lab.max()))
                if self.order is None:
                    prev = np.concatenate([[last_label[1] if last_label else -1], lab[:-1]])
                    bad = ~first & (lab <= prev)
                    if last_label is None or int(js[0]) != last_label[0] + 2:
                        bad[0] = False  # (the blocks' runs meet only where the ids follow on)
                    if bad.any():
                        k = int(np.flatnonzero(bad)[0])
                        i = int(js[k]) - 2
                        parent = int(ps[k] - js[k]) - 1
                        self.order = (parent, i, int(prev[k]), int(lab[k]))
                last_label = (int(js[-1]) - 1, int(lab[-1]), int(ps[-1]))
            prev_bit = bool(bits[-1])
            zc += len(zeros)
            oc += len(ones)
        if pend is not None:
            self._leaf(np.array([pend]), np.array([True]), term)

    def _tree(self, v, c) -> None:
        n = self.n
        if len(v) and v[0] == 0 and c[0] != 1:
            self.tree = 0, int(c[0])
            return
        bad = np.flatnonzero((v < n) & (c <= v))
        if len(bad):
            self.tree = int(v[bad[0]]), int(c[bad[0]])
        elif len(v) and v[-1] == n and c[-1] != n:
            self.tree = n, int(c[-1])

    def _leaf(self, v, leaf, term) -> None:
        if self.leaf is not None or not len(v):
            return
        t = (np.asarray(term[v >> 6], np.uint64) >> (v & 63).astype(np.uint64)) & np.uint64(1)
        if np.any(leaf & (t == 0)):
            self.leaf = True


def _tree_problems(path: Path, a: dict, n: int) -> Iterator[str]:
    """The LOUDS tree, its levels, the labels' order among siblings and the terminal flags (see _Walk)."""
    hb = int(a["high_bits"])
    words = a["louds"]
    walk = _Walk(a, n, hb)
    walk.run()
    if walk.ones != n or _tail_set(words, 2 * n + 1):
        yield f"{path / 'louds.npy'}: does not hold {n} ones in its first {2 * n + 1} bits and zeros after"
        return
    if walk.tree is not None:
        v, cv = walk.tree
        yield f"{path / 'louds.npy'}: not a tree in breadth-first order (node {v} would have children numbered {cv}..)"
        return
    lo = np.asarray(a["level_offsets"], np.int64)
    if np.any(np.diff(lo) <= 0) or walk.level:
        yield f"{path / 'level_offsets.npy'}: {lo.tolist()} are not the tree's breadth-first levels"
    if _tail_set(a["label_high"], (n - 1) * hb):
        yield f"{path / 'label_high.npy'}: bits past the last label are set"
    else:
        if (walk.max_label >> 16).bit_length() != hb:
            yield f"{path / 'manifest.json'}: high_bits {hb} is not the width of the largest label's high part"
        if walk.order is not None:
            parent, i, x, y = walk.order
            yield (f"{path / 'label_low.npy'}: labels not strictly increasing within the children of node {parent} "
                   f"(entry {i}: {x}, entry {i + 1}: {y})")
    term = a["terminal"]
    if _tail_set(term, n) or int(term[0]) & 1 or walk.leaf:
        yield f"{path / 'terminal.npy'}: a leaf is not terminal, the root is, or bits past node {n - 1} are set"


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
