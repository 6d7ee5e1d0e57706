"""A sharded build's last phase: the shards' pieces joined into the arrays the single-process build makes.

Nodes are numbered level by level and, within a level, in SID order, and a shard holds a range of first
tokens: so each level of the trie, the SID->ad map and the ads' lists are the shards' pieces one after
another, and the root's matcher is the union of the shards' SIDs. Matcher rows get their global ids in the
order the single-process build meets them (the ads' bitmask rows, then the root, then level by level, each
level shard by shard), so the tables come out row for row the same."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..._bits import row_popcount
from ...inputs.catalog import check_unique
from ...artifact.npy import load as load_npy
from ...artifact.writes import save_npy
from ..adindex import _argsort_ids
from ..dedup import RowDeduper, add_columns
from ..levels import level_k, node_partitions
from ..stats import table_stats
from ..trie import token_dtype
from ...artifact import index_format as fmt


@dataclass
class Topology:
    """What write_index reads of a trie."""
    level_offsets: np.ndarray
    node_offsets: np.ndarray
    child_tokens: np.ndarray
    max_degree: np.ndarray
    num_sids: int

    @property
    def num_nodes(self) -> int:
        return int(self.level_offsets[-1])


@njit(cache=True, nogil=True)
def _first_met(ids, remap, out):
    """The local ids of `ids` not yet given a global id, in the order first met (marked -2 meanwhile)."""
    k = 0
    for i in range(ids.shape[0]):
        x = ids[i]
        if remap[x] == -1:
            remap[x] = -2
            out[k] = x
            k += 1
    return k


class ShardFiles:
    """The shards' pieces as local files (pieces.land): load(s, name) maps one; tables(s) is (a key, shard s's
    local matcher tables), shards of one key sharing their local ids."""

    def __init__(self, pieces: list, n_tables: int):
        self.pieces, self.n_tables = pieces, n_tables

    def load(self, s: int, name: str) -> np.ndarray:
        return self.pieces[s].get(name)

    def tables(self, s: int) -> tuple:
        return s, [self.load(s, f"table{t}") for t in range(self.n_tables)]


class GlobalTables:
    """One deduplicating table a matcher table; shard s's local row ids map to global ones on first sight."""

    def __init__(self, pieces, n_shards: int, slices: list):
        self.dedupers = [RowDeduper(x.stop - x.start) for x in slices]
        self.slices = slices
        self.local, self.remap, self.key = {}, {}, []
        for s in range(n_shards):
            key, tabs = pieces.tables(s)
            self.key.append(key)
            if key not in self.local:
                self.local[key] = tabs
                self.remap[key] = [np.full(len(tab), -1, np.int32) for tab in tabs]

    def merge(self, s: int, t: int, ids: np.ndarray) -> np.ndarray:
        key = self.key[s]
        remap = self.remap[key][t]
        new = np.empty(len(ids), np.int32)
        k = _first_met(ids, remap, new)
        if k:
            remap[new[:k]] = self.dedupers[t].add(np.asarray(self.local[key][t][new[:k]]))
        return remap[ids]

    def tables(self) -> list:
        return [dd.table() for dd in self.dedupers]


def _concat(pieces: list, dtype) -> np.ndarray:
    return np.concatenate(pieces).astype(dtype, copy=False) if pieces else np.zeros(0, dtype)


def _joined(pieces: list, first: list, add: bool = False) -> np.ndarray:
    """Depth-1 pieces one after another, a shard's first entry joined to the previous shard's last where that
    node is split between them (add: summed, as degrees are; else the shard's own dropped)."""
    out = []
    for piece, shared in zip(pieces, first):
        if shared:
            if add:
                last = max(i for i, x in enumerate(out) if len(x))  # the node's first piece
                out[last] = np.array(out[last])
                out[last][-1] += piece[0]
            piece = piece[1:]
        out.append(piece)
    return _concat(out, pieces[0].dtype)


def _level(d: int, g: GlobalTables, load, metas: list, first: list, spec, rl) -> tuple:
    """(counts pieces, per table ids pieces) of depth 1, in node order. A node split between shards is
    partitioned here over all its SIDs' rows (as the single-process build does), its partitions' rows
    deduplicated where the node stands; the shards' partial partitions of it are passed over."""
    P, T = len(metas), len(g.slices)
    last = first[1:] + [False]
    counts, ids = [], [[] for _ in range(T)]
    s = 0
    while s < P:
        c = np.asarray(load(s, f"counts{d}"))
        off = np.concatenate([[0], np.cumsum(c)])
        a, b = int(first[s]), len(c) - int(last[s])
        if a < b:
            counts.append(c[a:b])
            for t in range(T):
                ids[t].append(g.merge(s, t, np.asarray(load(s, f"ids{d}_{t}"))[off[a]:off[b]]))
        if not last[s]:
            s += 1
            continue
        members, s = [load(s, "split_last_rows")], s + 1
        while last[s] and metas[s]["levels"][0] == 1:  # the node fills this shard
            members.append(load(s, "split_last_rows"))
            s += 1
        members.append(load(s, "split_first_rows"))
        M = np.concatenate(members)
        n, parts = node_partitions(spec, d, M, np.zeros(1, np.int64), np.full(1, len(M), np.int64), rl)
        counts.append(n)
        for t, x in enumerate(add_columns(g.dedupers, parts, g.slices)):
            ids[t].append(x)
    return counts, ids


CHUNK = 1 << 24  # entries a step when a streamed array is derived from another (bounds the temporaries)


class Streamer:
    """Arrays written into the artifact front to back, piece by piece (never held whole, never mapped while
    written), then read back mapped where the statistics need them."""

    def __init__(self, w):
        self.w = w

    def pieces(self, name: str, dtype, pieces: list, shift: bool = False, read: bool = True):
        """The pieces one after another (shift: offsets pieces, each continuing from the last value written,
        its leading 0 dropped, after one leading 0)."""
        n = sum(len(x) - (1 if shift else 0) for x in pieces) + int(shift)
        out, carry = self.w.stream_array(name, dtype, n), 0
        if shift:
            out.write(np.zeros(1, dtype))
        for x in pieces:
            x = np.asarray(x)
            if shift:
                x = x[1:] - x[0] + carry
                carry = int(x[-1]) if len(x) else carry
            out.write(x)
        return self.finish(out, read)

    def cumsum(self, name: str, dtype, pieces: list, read: bool = True):
        """0, then the running sum of the pieces' values."""
        out, carry = self.w.stream_array(name, dtype, sum(len(x) for x in pieces) + 1), 0
        out.write(np.zeros(1, dtype))
        for x in pieces:
            c = np.cumsum(np.asarray(x), dtype=np.int64) + carry
            out.write(c)
            carry = int(c[-1]) if len(c) else carry
        return self.finish(out, read)

    def mapped(self, name: str, dtype, n: int, fn, read: bool = True):
        """fn(a, b) for the chunks [a, b) of [0, n), one after another."""
        out = self.w.stream_array(name, dtype, n)
        for a in range(0, n, CHUNK):
            out.write(fn(a, min(n, a + CHUNK)))
        return self.finish(out, read)

    def finish(self, out, read: bool = True):
        out.close()
        return load_npy(out.path, "r") if read else None


def assemble(stage, metas: list, schema, rl, dictionaries: list, source, w, pieces) -> dict:
    """Every array and statistic write_index takes, from the shards' pieces; the large arrays are streamed
    into the writer w as they are made (mapped views come back); stage: a local folder for the levels' working
    files. source: the catalog's ParquetInput (a repeated ad id is named by its file and row there); dictionaries:
    the global ones; pieces: where shard s's pieces are read (ShardFiles, or an index cut into subtrees by an
    update's rebuild)."""
    L, V, spec = schema.sid_length, schema.vocab, schema.partition
    P = len(metas)
    slices = rl.slices()
    load = pieces.load
    out = Streamer(w)
    trie = _topology(out, load, metas, L, V)
    ads = _ads(out, load, P, schema, source)
    widths = [x.stop - x.start for x in slices]
    g = GlobalTables(pieces, P, slices)
    ads["ad_bitmask_ids"] = out.pieces("ad_bitmask_ids", np.int32,
                                       [g.merge(s, 0, load(s, "ad_ids0")) for s in range(P)])
    root = np.bitwise_or.reduce(np.stack([m["union"] for m in metas]), axis=0)[None, :]
    first = _shared_first(metas)
    levels = [(np.ones(1, np.int64), add_columns(g.dedupers, root, slices))]
    for d in range(1, L + 1):
        counts, ids = _level(d, g, load, metas, first, spec, rl) if d == 1 else (
            [load(s, f"counts{d}") for s in range(P)],
            [[g.merge(s, t, load(s, f"ids{d}_{t}")) for s in range(P)] for t in range(len(slices))])
        levels.append((_concat(counts, np.int64), [_concat(x, np.int32) for x in ids]))
        save_npy(stage / f"level{d}_counts.npy", levels[-1][0])
        for t, x in enumerate(levels[-1][1]):
            save_npy(stage / f"level{d}_ids{t}.npy", x)
        levels[-1] = None  # the level's ids live on in the staging area; statistics read them there
    tables = g.tables()
    del g
    pops = [row_popcount(tab) for tab in tables]
    level_stats = []
    for d in range(1, L + 1):
        ids = [load_npy(stage / f"level{d}_ids{t}.npy") for t in range(len(slices))]
        level_stats.append(table_stats(load_npy(stage / f"level{d}_counts.npy"), ids,
                                       [p[i] for p, i in zip(pops, ids)], widths, rl))
    ad_level = table_stats(np.ones(len(ads["sid_ad_ids"]), np.int64), [ads["ad_bitmask_ids"]],
                           [pops[0][ads["ad_bitmask_ids"]]], widths[:1], rl)
    matchers = _matcher_columns(out, stage, spec, levels[0], trie.level_offsets, L, len(slices))

    nbm = len(schema.bitmask)
    ad_lists = []
    for b in range(len(schema.bloom)):
        pair = []
        for kind, names in (("allowed", fmt.ad_allow(b)), ("excluded", fmt.ad_exclude(b))):
            off = out.pieces(names[0], np.int64, [load(s, f"ad_{kind}{b}_offsets") for s in range(P)], shift=True)
            codes = out.pieces(names[1], np.int32, [load(s, f"ad_{kind}{b}_codes") for s in range(P)])
            pair.append((off, codes))
        ad_lists.append((pair[0], pair[1], dictionaries[nbm + b]))
    return {"trie": trie, "tables": tables, "level_stats": level_stats, "ad_level": ad_level, "ads": ads,
            "ad_lists": ad_lists, "matchers": matchers}


def _shared_first(metas: list) -> list:
    """Shards whose first depth-1 node is the previous shard's last (a hot first token split between them)."""
    return [s > 0 and m["first_token"] == metas[s - 1]["last_token"] for s, m in enumerate(metas)]


def _topology(out: Streamer, load, metas: list, L: int, V: int) -> Topology:
    P = len(metas)
    first = _shared_first(metas)
    sizes = [1] + [sum(m["levels"][d - 1] for m in metas) - (sum(first) if d == 1 else 0) for d in range(1, L + 1)]
    level_offsets = np.zeros(L + 2, np.int64)
    np.cumsum(sizes, out=level_offsets[1:])
    degrees = [np.array([sizes[1]], np.int64)]
    if L > 1:
        degrees.append(_joined([np.array(load(s, "degrees1")) for s in range(P)], first, add=True))
    max_degree = np.array([sizes[1]] + ([int(degrees[1].max())] if L > 1 else [])
                          + [max(m["max_degree"][d] for m in metas) for d in range(2, L)], np.int64)
    degrees += [load(s, f"degrees{d}") for d in range(2, L) for s in range(P)]
    node_offsets = out.cumsum("node_offsets", np.int32, degrees)
    child_tokens = out.pieces("child_tokens", token_dtype(V), [_joined([load(s, "tokens1") for s in range(P)], first)]
                              + [load(s, f"tokens{d}") for d in range(2, L + 1) for s in range(P)])
    return Topology(level_offsets, node_offsets, child_tokens, max_degree, sum(m["sids"] for m in metas))


def _ads(out: Streamer, load, P: int, schema, source) -> dict:
    """The SID->ad map and the ad-id lookup; a repeated ad id refused as the single-process read does."""
    offsets = out.pieces("sid_ad_offsets", np.int64, [load(s, "sid_ad_offsets") for s in range(P)], shift=True)
    ids = _concat([load(s, "sid_ad_ids") for s in range(P)], np.int64)
    by_id = _argsort_distinct(ids)
    n = len(by_id)

    def ascending(a, b):  # a chunk of the sorted ids, checked against its neighbour one past it
        x = ids[by_id[a:min(n, b + 1)]]
        if np.any(x[1:] == x[:-1]):
            raise _Repeated
        return x[:b - a]
    try:
        out.mapped("ad_ids_sorted", np.int64, n, ascending, read=False)
    except _Repeated:
        in_file_order = np.empty(len(ids), np.int64)
        in_file_order[_concat([load(s, "input_rows") for s in range(P)], np.int64)] = ids
        check_unique(in_file_order, schema.ad_id_column, source)
        raise
    out.mapped("ad_rows_by_id", np.int32, len(by_id), lambda a, b: by_id[a:b], read=False)
    written = out.mapped("sid_ad_ids", np.int64, len(ids), lambda a, b: ids[a:b])
    return {"sid_ad_offsets": offsets, "sid_ad_ids": written, "ad_ids_sorted": _Sized(out.w, "ad_ids_sorted"),
            "ad_rows_by_id": _Sized(out.w, "ad_rows_by_id")}


def _argsort_distinct(ids: np.ndarray) -> np.ndarray:
    """adindex._argsort_ids (the same order) with one array beside the ids: (id - min) << bits | row sorted in
    place, then the rows kept in place."""
    n = len(ids)
    if n == 0:
        return np.zeros(0, np.int64)
    lo, hi = int(ids.min()), int(ids.max())
    bits = max(1, (n - 1).bit_length())
    if (hi - lo).bit_length() + bits > 64:
        return _argsort_ids(ids)
    packed = np.subtract(ids, lo).view(np.uint64)
    packed <<= np.uint64(bits)
    for a in range(0, n, CHUNK):
        packed[a:a + CHUNK] |= np.arange(a, min(n, a + CHUNK), dtype=np.uint64)
    packed.sort()
    packed &= np.uint64((1 << bits) - 1)
    return packed.view(np.int64)


class _Repeated(Exception):
    """An ad id twice among the shards' ads (named by check_unique)."""


def _matcher_columns(out: Streamer, stage, spec, root, level_offsets, L: int, n_tables: int) -> tuple:
    """build._matcher_columns, level by level from the staging area into the writer, front to back."""
    counts = [root[0]] + [load_npy(stage / f"level{d}_counts.npy", "r") for d in range(1, L + 1)]
    ids = [root[1]] + [[load_npy(stage / f"level{d}_ids{t}.npy", "r") for t in range(n_tables)]
                       for d in range(1, L + 1)]
    nb = n_tables - 1
    if spec.mode == "dynamic":
        out.cumsum("part_offsets", np.int64, counts, read=False)
        out.pieces("part_bitmask_ids", np.int32, [lv[0] for lv in ids], read=False)
        if nb:
            bloom = out.w.stream_array("part_bloom_ids", np.int32, (sum(len(lv[0]) for lv in ids), nb))
            for lv in ids:
                for a in range(0, len(lv[0]), CHUNK):
                    bloom.write(np.stack([np.asarray(lv[t][a:a + CHUNK]) for t in range(1, n_tables)], axis=1))
            out.finish(bloom, read=False)
        return _sizes(out.w), {"kind": "jagged"}
    widths = [level_k(spec, d) for d in range(L + 1)]
    bases = np.zeros(L + 2, np.int64)
    np.cumsum([len(counts[d]) * widths[d] for d in range(L + 1)], out=bases[1:])
    cols = [out.w.stream_array("part_bitmask_ids", np.int32, int(bases[-1]))]
    if nb:
        cols.append(out.w.stream_array("part_bloom_ids", np.int32, (int(bases[-1]), nb)))
    for d in range(L + 1):
        c, w = np.asarray(counts[d]), widths[d]
        off = np.concatenate([[0], np.cumsum(c)])
        for a in range(0, len(c), max(1, CHUNK // w)):
            b = min(len(c), a + max(1, CHUNK // w))
            node = np.repeat(np.arange(b - a), c[a:b])
            pos = node * w + (np.arange(off[a], off[b]) - off[a:b][node])
            for t, col in enumerate(cols):
                block = np.full(((b - a) * w, nb) if t else (b - a) * w, -1, np.int32)
                if t:
                    block[pos] = np.stack([np.asarray(ids[d][x][off[a]:off[b]]) for x in range(1, n_tables)], axis=1)
                else:
                    block[pos] = ids[d][0][off[a]:off[b]]
                col.write(block)
    for name, col in zip(("part_bitmask_ids", "part_bloom_ids"), cols):
        out.finish(col, read=False)
    return _sizes(out.w), {"kind": "fixed", "level_width": widths, "level_base": bases.tolist()}


class _Sized:
    """An array already in the writer, as write_index sees it: only its size is read."""

    def __init__(self, w, name: str):
        e = w.entry(name)
        self.nbytes = int(np.prod(e["shape"], dtype=np.int64)) * np.dtype(e["dtype"]).itemsize


def _sizes(w) -> dict:
    return {n: _Sized(w, n) for n in ("part_offsets", "part_bitmask_ids", "part_bloom_ids") if w.has(n)}
