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


def _rank_shape(nbits: int) -> tuple:
    return ("<u8", ((words_for(nbits) + 7) // 8 + 1, 2))


def expected_shapes(n: int, m: int, hb: int, tails: tuple = (0, 0, 0, 0, 0), levels: tuple = (16, 0, None)) -> dict:
    """Array name -> (dtype, shape); tails: (tail nodes, code base bits, escape bits, dictionary size, wide codes);
    levels: (low_bits, constant deepest levels K, their first node c or None for n)."""
    n_l, n_t = words_for(2 * n + 1), words_for(n)
    t, tb, th, v, w = tails
    lb, k, c = levels
    heads = (n if c is None else c) - 1 - t
    return {
        "label_tail": ("<u8", (words_for(n - 1) if t else 1,)), "label_tail_rank": _rank_shape(n - 1 if t else 0),
        "tail_dict": ("<i4", (v,)), "tail_low": ("<u8", (words_for(t * tb),)),
        "tail_wide": ("<u8", (words_for(t) if th else 1,)), "tail_wide_rank": _rank_shape(t if th else 0),
        "tail_high": ("<u8", (words_for(w * th),)),
        "label_low": ("|u1" if lb == 8 else "<u2", (heads,)), "level_label": ("<i4", (k,)), "label_high": ("<u8", (((heads) * hb >> 6) + 1,)),
        "louds": ("<u8", (n_l,)), "louds_rank": ("<u8", ((n_l + 7) // 8 + 1, 2)),
        "louds_select0": ("<u4", (-(-(n + 1) // SAMPLE) + 1,)), "louds_select1": ("<u4", (-(-n // SAMPLE) + 1,)),
        "terminal": ("<u8", (n_t,)), "terminal_rank": ("<u8", ((n_t + 7) // 8 + 1, 2)),
        "terminal_select1": ("<u4", (-(-m // SAMPLE) + 1,)),
    }


def manifest_counts(man: dict) -> tuple:
    """(num_nodes, num_keys, high_bits, max_depth), each checked; FieldError names a bad one."""
    n = field(man, "num_nodes", "", int, 2, MAX_NODES)
    m, depth = field(man, "num_keys", "", int, 1), field(man, "max_depth", "", int, 1)
    if m >= n or depth >= n:
        raise FieldError(f"num_keys {m} and max_depth {depth} must be below num_nodes {n}")
    lb = field(man, "low_bits", "", int, 8, 16) if "low_bits" in man else 16
    if lb not in (8, 16):
        raise FieldError(f"low_bits {lb} must be 8 or 16")
    return n, m, field(man, "high_bits", "", int, 0, 31 - lb), depth


def level_counts(man: dict, depth: int) -> tuple:
    """(low_bits, constant deepest levels): the manifest's label fields, checked (16 and 0 where absent)."""
    lb = field(man, "low_bits", "", int, 8, 16) if "low_bits" in man else 16
    return lb, field(man, "const_levels", "", int, 0, depth - 1) if "const_levels" in man else 0


def tail_counts(man: dict, n: int) -> tuple:
    """(tail nodes, code base bits, escape bits, dictionary size): the manifest's tail fields, checked."""
    t = field(man, "tail_nodes", "", int, 0, n - 1)
    v = field(man, "tail_dict_size", "", int, 0 if t == 0 else 1, max(t, 0))
    cw = max(v - 1, 0).bit_length()
    tb = field(man, "tail_low_bits", "", int, 0, cw)
    th = field(man, "tail_high_bits", "", int, 0, cw - tb)
    if th and th != cw - tb:
        raise FieldError(f"tail_high_bits {th} must be 0 or {cw - tb} for {v} dictionary tokens and tail_low_bits {tb}")
    return t, tb, th, v


def shape_problems(path: Path, a: dict, n: int, m: int, hb: int, depth: int, tails: tuple,
                   levels: tuple = (16, 0)) -> Iterator[str]:
    t, tb, th, v = tails
    lo = a["level_offsets"]
    good_levels = lo.dtype.str == "<i8" and lo.shape == (depth + 2,) and lo[0] == 0 and lo[-1] == n
    c = int(lo[depth + 1 - levels[1]]) if good_levels else None  # the first node of the constant levels
    c = c if c is not None and 1 <= c <= n else None
    tw = a["tail_wide"]
    w = 0
    if th and tw.dtype.str == "<u8" and tw.shape == (words_for(t),):
        w = int(np.unpackbits(np.ascontiguousarray(tw).view(np.uint8)).sum())  # sizes tail_high; checked below
    for name, (dt, shape) in expected_shapes(n, m, hb, tails + (w,), levels + (c,)).items():
        if a[name].dtype.str != dt or a[name].shape != shape:
            yield (f"{path}: array {name} is {a[name].dtype.str} {list(a[name].shape)}, "
                   f"expected {dt} {list(shape)} for num_nodes {n}, num_keys {m}, high_bits {hb}")
    if not good_levels:
        yield f"{path}: array level_offsets is not {depth + 2} int64 from 0 to num_nodes {n} (max_depth {depth})"
    elif int(a["louds_rank"][-1, 0]) != n or int(a["terminal_rank"][-1, 0]) != m:
        yield f"{path}: louds_rank / terminal_rank end at {int(a['louds_rank'][-1, 0])} / " \
              f"{int(a['terminal_rank'][-1, 0])} ones, not num_nodes {n} / num_keys {m}"


BLOCK_WORDS = 1 << 18  # LOUDS words a pass holds at once (16M bits): a billion-key trie checks in bounded memory


def _bits(words: np.ndarray) -> np.ndarray:
    return np.unpackbits(np.ascontiguousarray(words).view(np.uint8), bitorder="little").view(np.bool_)


def _tail_set(words, nbits: int) -> bool:
    """Any bit at or past nbits set in the LSB-first words?"""
    w, b = int(nbits) >> 6, int(nbits) & 63
    if w >= len(words):
        return False
    first = int(words[w]) >> b
    return bool(first) or bool(np.any(np.asarray(words[w + 1:])))


def _fields(words, idx: np.ndarray, width: int) -> np.ndarray:
    """int64: fields idx of a packed uint64 array of width-bit fields."""
    if width == 0 or not len(idx):
        return np.zeros(len(idx), np.int64)
    p = idx.astype(np.int64) * width
    w, off = p >> 6, (p & 63).astype(np.uint64)
    words = np.asarray(words, np.uint64)
    straddle = off + np.uint64(width) > 64
    nxt = words[np.minimum(w + 1, len(words) - 1)] << np.where(straddle, np.uint64(64) - off, np.uint64(0))
    v = (words[w] >> off) | np.where(straddle, nxt, np.uint64(0))
    return (v & np.uint64((1 << width) - 1)).astype(np.int64)


def _labels(a: dict, lo: int, hi: int, hb: int) -> np.ndarray:
    """int64 [hi-lo]: labels of entries lo..hi-1 (entry j: node j+1): a tail node's its code's dictionary token,
    a constant level's node its level_label, another's label_low | (hb-bit field) << low_bits at its head entry."""
    c = int(a["const_from"])
    if hi > c - 1:  # entries of the constant deepest levels
        out = np.empty(hi - lo, np.int64)
        mid = max(lo, c - 1)
        out[:mid - lo] = _labels(a, lo, mid, hb)
        lev = np.asarray(a["level_offsets"], np.int64)
        k = len(a["level_label"])
        out[mid - lo:] = np.asarray(a["level_label"], np.int64)[
            np.searchsorted(lev[len(lev) - 1 - k:], np.arange(mid, hi) + 1, side="right") - 1]
        return out
    if a["tail_nodes"]:
        flags = _bits(a["label_tail"])
        tail_before = np.concatenate([[0], np.cumsum(flags[:hi])])
        j = np.arange(lo, hi, dtype=np.int64)
        is_tail = flags[lo:hi]
        out = np.empty(hi - lo, np.int64)
        heads = j[~is_tail] - tail_before[j[~is_tail]]
        out[~is_tail] = _head_labels(a, heads, hb)
        out[is_tail] = a["tail_dict"][a["tail_codes"][tail_before[j[is_tail]]]]
        return out
    return _head_labels(a, np.arange(lo, hi, dtype=np.int64), hb)


def _head_labels(a: dict, idx: np.ndarray, hb: int) -> np.ndarray:
    low = np.asarray(a["label_low"], np.int64)[idx] if len(idx) else np.zeros(0, np.int64)
    return low | (_fields(a["label_high"], idx, hb) << int(a["low_bits"]))


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
    if a.get("tail_nodes") and "tail_codes" not in a:  # tail labels decode only from a checked tail store
        tails = (int(a["tail_nodes"]), int(a["tail_low_bits"]), int(a["tail_high_bits"]), len(a["tail_dict"]))
        a = dict(a)
        problems = list(tail_problems(path, a, n, tails))
        if problems:
            yield from problems
            return
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
    if _tail_set(a["label_high"], (int(a["const_from"]) - 1 - int(a.get("tail_nodes", 0))) * hb):
        yield f"{path / 'label_high.npy'}: bits past the last label are set"
    else:
        if walk.order is not None:
            parent, i, x, y = walk.order
            yield (f"{path / 'label_low.npy'}: labels not strictly increasing within the children of node {parent} "
                   f"(entry {i}: {x}, entry {i + 1}: {y})")
    term = a["terminal"]
    if _tail_set(term, n) or int(term[0]) & 1 or walk.leaf:
        yield f"{path / 'terminal.npy'}: a leaf is not terminal, the root is, or bits past node {n - 1} are set"


def _clear_past(words, nbits: int) -> bool:
    return not _tail_set(words, nbits)


def tail_problems(path: Path, a: dict, n: int, tails: tuple) -> Iterator[str]:
    """The tail store against the tree: label_tail flags exactly the sole children of non-root, single-child
    nodes that end no key (none when tail_nodes is 0), directories equal to the bit vectors', dictionary tokens
    distinct and in [0, 2^31-1], every code inside the dictionary. Sets a["tail_codes"] for the label checks."""
    t, tb, th, v = tails
    bits = _bits(a["louds"])[:2 * n + 1]
    z = np.flatnonzero(~bits)[:n + 1]
    if len(z) < n + 1:
        yield f"{path / 'louds.npy'}: does not hold {n + 1} zeros in its first {2 * n + 1} bits"
        return
    deg = np.diff(z) - 1
    term = _bits(a["terminal"])[:n]
    v_ids = np.arange(n, dtype=np.int64)
    chain = (v_ids >= 1) & (deg == 1) & ~term
    want = np.zeros(n - 1, np.bool_)
    child = (z[:-1] - v_ids)[chain] - 1
    if len(child) and (child.min() < 0 or child.max() >= n - 1):
        yield f"{path / 'louds.npy'}: not a tree in breadth-first order"
        return
    want[child[child < int(a["const_from"]) - 1]] = True  # nodes of the constant levels are never tail nodes
    got = _bits(a["label_tail"])
    if t and (not np.array_equal(got[:n - 1], want) or _tail_set(a["label_tail"], n - 1)):
        yield f"{path / 'label_tail.npy'}: does not flag exactly the sole children of single-child nodes that end no key"
        return
    if not t and np.any(got):
        yield f"{path / 'label_tail.npy'}: bits set while tail_nodes is 0"
        return
    for vec, rank in (("label_tail", "label_tail_rank"), ("tail_wide", "tail_wide_rank")):
        if not np.array_equal(rank_directory(np.ascontiguousarray(a[vec])), a[rank]):
            yield f"{path / (rank + '.npy')}: rank directory differs from the one of {vec}.npy"
            return
    wide = _bits(a["tail_wide"])
    if th == 0 and np.any(wide) or th and _tail_set(a["tail_wide"], t):
        yield f"{path / 'tail_wide.npy'}: bits set past the tail nodes or while tail_high_bits is 0"
        return
    nw = int(wide.sum())
    if _tail_set(a["tail_low"], t * tb) or _tail_set(a["tail_high"], nw * th):
        yield f"{path / 'tail_low.npy'}: bits past the last tail code are set"
        return
    d = np.asarray(a["tail_dict"], np.int64)
    if np.any(d < 0) or len(np.unique(d)) != len(d):
        yield f"{path / 'tail_dict.npy'}: tokens are negative or repeated"
        return
    i = np.arange(t, dtype=np.int64)
    codes = _fields(a["tail_low"], i, tb)
    if th:
        w = wide[:t]
        codes[w] |= _fields(a["tail_high"], np.arange(nw, dtype=np.int64), th) << tb
    if t and int(codes.max()) >= v:
        yield f"{path / 'tail_low.npy'}: a tail code is past the {v} dictionary tokens"
        return
    a["tail_codes"] = codes
    heads = int(a["const_from"]) - 1 - t
    if heads:
        top = int(_head_labels(a, np.arange(heads, dtype=np.int64), a["high_bits"]).max())
        if (top >> int(a["low_bits"])).bit_length() != a["high_bits"]:
            yield f"{path / 'manifest.json'}: high_bits {a['high_bits']} is not the width of the largest label's high part"


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
        tails = tail_counts(man, n)
        levels = level_counts(man, depth)
    except FieldError as e:
        yield f"{path / 'manifest.json'}: {e}"
        return
    stage = list(shape_problems(path, arrays, n, m, hb, depth, tails, levels))
    yield from stage
    if stage or not full:
        return
    if np.any(np.asarray(arrays["level_label"]) < 0):
        yield f"{path / 'level_label.npy'}: a negative token"
        return
    c = int(arrays["level_offsets"][depth + 1 - levels[1]])
    a = dict(arrays, high_bits=hb, tail_nodes=tails[0], low_bits=levels[0], const_from=c)
    tree = list(tail_problems(path, a, n, tails))
    if not tree:
        tree = list(_tree_problems(path, a, n))
    yield from tree
    if not tree:
        yield from _directory_problems(path, a, n, m)
