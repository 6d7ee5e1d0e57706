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
from ...formats.catalog import check_unique
from ..adindex import _argsort_ids
from ..dedup import RowDeduper, add_columns
from ..stats import table_stats
from ..trie import token_dtype
from .shard import shard_dir


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


class GlobalTables:
    """One deduplicating table a matcher table; shard s's local row ids map to global ones on first sight."""

    def __init__(self, stage, n_shards: int, slices: list):
        self.dedupers = [RowDeduper(x.stop - x.start) for x in slices]
        self.slices = slices
        self.local = [[np.load(shard_dir(stage, s) / f"table{t}.npy", mmap_mode="r") for t in range(len(slices))]
                      for s in range(n_shards)]
        self.remap = [[np.full(len(tab), -1, np.int32) for tab in tabs] for tabs in self.local]

    def merge(self, s: int, t: int, ids: np.ndarray) -> np.ndarray:
        remap = self.remap[s][t]
        new = np.empty(len(ids), np.int32)
        k = _first_met(ids, remap, new)
        if k:
            remap[new[:k]] = self.dedupers[t].add(np.asarray(self.local[s][t][new[:k]]))
        return remap[ids]

    def tables(self) -> list:
        return [dd.table() for dd in self.dedupers]


def _concat(pieces: list, dtype) -> np.ndarray:
    return np.concatenate(pieces).astype(dtype, copy=False) if pieces else np.zeros(0, dtype)


def _csr(offsets: list, values: list, dtype) -> tuple:
    """Lists pieces one after another: offsets shifted by the values before them."""
    total = sum(len(o) - 1 for o in offsets)
    off = np.zeros(total + 1, np.int64)
    pos = 0
    for o in offsets:
        off[pos + 1:pos + len(o)] = o[1:] + off[pos]
        pos += len(o) - 1
    return off, _concat(values, dtype)


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
    from ..build import node_partitions

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


def assemble(stage, metas: list, schema, rl, dictionaries: list, source) -> dict:
    """Every array and statistic write_index takes, from the shards' pieces. source: the catalog's
    ParquetInput (a repeated ad id is named by its file and row there); dictionaries: the global ones."""
    L, V, spec = schema.sid_length, schema.vocab, schema.partition
    P = len(metas)
    load = lambda s, name: np.load(shard_dir(stage, s) / f"{name}.npy", mmap_mode="r")  # noqa: E731
    # shards whose first depth-1 node is the previous shard's last (a hot first token split between them)
    first = [s > 0 and m["first_token"] == metas[s - 1]["last_token"] for s, m in enumerate(metas)]
    sizes = [1] + [sum(m["levels"][d - 1] for m in metas) - (sum(first) if d == 1 else 0) for d in range(1, L + 1)]
    level_offsets = np.zeros(L + 2, np.int64)
    np.cumsum(sizes, out=level_offsets[1:])
    degrees = [np.array([sizes[1]], np.int64)]
    if L > 1:
        degrees.append(_joined([np.array(load(s, "degrees1")) for s in range(P)], first, add=True))
    degrees += [load(s, f"degrees{d}") for d in range(2, L) for s in range(P)]
    node_offsets = np.zeros(int(level_offsets[L]) + 1, np.int32)
    np.cumsum(_concat(degrees, np.int64), out=node_offsets[1:])
    child_tokens = _concat([_joined([load(s, "tokens1") for s in range(P)], first)]
                           + [load(s, f"tokens{d}") for d in range(2, L + 1) for s in range(P)], token_dtype(V))
    max_degree = np.array([sizes[1]] + [int(degrees[1].max()) if d == 1 else max(m["max_degree"][d] for m in metas)
                                        for d in range(1, L)], np.int64)
    trie = Topology(level_offsets, node_offsets, child_tokens, max_degree, sum(m["sids"] for m in metas))

    sid_ad_offsets, sid_ad_ids = _csr([load(s, "sid_ad_offsets") for s in range(P)],
                                      [load(s, "sid_ad_ids") for s in range(P)], np.int64)
    by_id = _argsort_ids(sid_ad_ids)
    ad_ids_sorted = sid_ad_ids[by_id]
    if len(ad_ids_sorted) > 1 and np.any(ad_ids_sorted[1:] == ad_ids_sorted[:-1]):
        in_file_order = np.empty_like(sid_ad_ids)
        in_file_order[_concat([load(s, "input_rows") for s in range(P)], np.int64)] = sid_ad_ids
        check_unique(in_file_order, schema.ad_id_column, source)
    ads = {"sid_ad_offsets": sid_ad_offsets, "sid_ad_ids": sid_ad_ids, "ad_ids_sorted": ad_ids_sorted,
           "ad_rows_by_id": by_id.astype(np.int32)}

    slices = rl.slices()
    widths = [x.stop - x.start for x in slices]
    g = GlobalTables(stage, P, slices)
    ads["ad_bitmask_ids"] = _concat([g.merge(s, 0, load(s, "ad_ids0")) for s in range(P)], np.int32)
    root = np.bitwise_or.reduce(np.stack([m["union"] for m in metas]), axis=0)[None, :]
    level_counts = [np.ones(1, np.int64)]
    level_ids = [add_columns(g.dedupers, root, slices)]
    for d in range(1, L + 1):
        counts, ids = _level(d, g, load, metas, first, spec, rl) if d == 1 else (
            [load(s, f"counts{d}") for s in range(P)],
            [[g.merge(s, t, load(s, f"ids{d}_{t}")) for s in range(P)] for t in range(len(slices))])
        level_counts.append(_concat(counts, np.int64))
        level_ids.append([_concat(x, np.int32) for x in ids])
    tables = g.tables()
    pops = [row_popcount(tab) for tab in tables]
    level_stats = [table_stats(level_counts[d], level_ids[d], [p[i] for p, i in zip(pops, level_ids[d])], widths, rl)
                   for d in range(1, L + 1)]
    ad_level = table_stats(np.ones(len(sid_ad_ids), np.int64), [ads["ad_bitmask_ids"]],
                           [pops[0][ads["ad_bitmask_ids"]]], widths[:1], rl)

    nbm = len(schema.bitmask)
    ad_lists = []
    for b in range(len(schema.bloom)):
        pair = [_csr([load(s, f"ad_{kind}{b}_offsets") for s in range(P)],
                     [load(s, f"ad_{kind}{b}_codes") for s in range(P)], np.int32) for kind in ("allowed", "excluded")]
        ad_lists.append((pair[0], pair[1], dictionaries[nbm + b]))
    return {"trie": trie, "level_counts": level_counts, "level_ids": level_ids, "tables": tables,
            "level_stats": level_stats, "ad_level": ad_level, "ads": ads, "ad_lists": ad_lists, "spec": spec}
