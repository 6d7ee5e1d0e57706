"""An index cut into its depth-1 subtrees, the unit a shard rebuild works in (docs/design.md §9): nodes are numbered
level by level and, within a level, in SID order, so the nodes of a run of depth-1 subtrees are one range a level,
their ads one range of rows. A run kept from the index hands the assembler (shards/assemble.py) the pieces a
shard task would have written, as slices of the index's arrays; its matcher ids stay the index's table rows."""

from __future__ import annotations

import re

import numpy as np

from ..shards.assemble import ShardFiles


def subtree_bounds(index) -> list:
    """[None, R1, ..., RL]: Rd[i] is the first depth-d node of depth-1 subtree i, Rd[-1] the level's end."""
    lo = np.asarray(index.level_offsets, np.int64)
    no = np.asarray(index.node_offsets)
    out = [None, np.arange(lo[1], lo[2] + 1, dtype=np.int64)]
    for _ in range(2, index.sid_length + 1):
        out.append(no[out[-1]].astype(np.int64) + 1)  # a node's first child; child j of the CSR is node j + 1
    return out


def _span(arr, a: int, b: int) -> np.ndarray:
    """arr[a:b] as int64: the slice converted, not the whole (mapped) array."""
    return np.asarray(arr)[a:b].astype(np.int64)


class Run:
    """Depth-1 subtrees [i0, i1) of an index: their nodes a level, SIDs and ad rows."""

    def __init__(self, index, R: list, i0: int, i1: int):
        self.index, self.L = index, index.sid_length
        self.nodes = [None] + [(int(R[d][i0]), int(R[d][i1])) for d in range(1, self.L + 1)]
        a, b = self.nodes[self.L]
        self.sids = (a - index.first_leaf, b - index.first_leaf)
        off = np.asarray(index.sid_ad_offsets)
        self.rows = (int(off[self.sids[0]]), int(off[self.sids[1]]))
        self._level = (None, None)  # the last level's partitions: the assembler reads a level's pieces in a row
        self._leaf_sids = None

    def leaf_sids(self) -> np.ndarray:
        """int32 [SIDs, L]: the tokens of the run's SIDs, in leaf order (made once: a hot subtree's tasks share it)."""
        if self._leaf_sids is None:
            self._leaf_sids = self._make_leaf_sids()
        return self._leaf_sids

    def row_sids(self, rows: np.ndarray) -> np.ndarray:
        """int32 [len(rows), L]: the SIDs of the run's ad rows `rows`."""
        off = np.asarray(self.index.sid_ad_offsets)[self.sids[0]:self.sids[1] + 1]
        return self.leaf_sids()[np.searchsorted(off, rows, side="right") - 1]

    def _make_leaf_sids(self) -> np.ndarray:
        idx = self.index
        tokens = np.asarray(idx.child_tokens)
        a, b = self.nodes[1]
        out = tokens[a - 1:b - 1].astype(np.int32)[:, None]
        for d in range(2, self.L + 1):
            pa, pb = self.nodes[d - 1]
            a, b = self.nodes[d]
            parent = np.repeat(np.arange(pb - pa), np.diff(_span(idx.node_offsets, pa, pb + 1)))
            out = np.concatenate([out[parent], tokens[a - 1:b - 1].astype(np.int32)[:, None]], axis=1)
        return out

    def partitions(self, d: int) -> tuple:
        """(partitions a node, per matcher table the partitions' ids) of the run's depth-d nodes (d >= 1)."""
        if self._level[0] != d:
            self._level = (d, self._partitions(d))
        return self._level[1]

    def _partitions(self, d: int) -> tuple:
        idx, (a, b) = self.index, self.nodes[d]
        bm = np.asarray(idx.part_bitmask_ids)
        bloom = np.asarray(idx.part_bloom_ids) if idx.bloom else np.zeros((len(bm), 0), np.int32)
        lay = idx.partition_layout
        if lay["kind"] == "jagged":
            po = _span(idx.part_offsets, a, b + 1)
            p, q = int(po[0]), int(po[-1])
            return np.diff(po), [bm[p:q]] + [bloom[p:q, t] for t in range(bloom.shape[1])]
        w = int(lay["level_width"][d])
        p = int(lay["level_base"][d]) + (a - int(idx.level_offsets[d])) * w
        q = p + (b - a) * w
        slots = bm[p:q].reshape(-1, w)
        used = slots >= 0  # a node's partitions fill its first slots, -1 the rest
        return (used.sum(axis=1).astype(np.int64), [slots[used]]
                + [bloom[p:q, t].reshape(-1, w)[used] for t in range(bloom.shape[1])])

    def meta(self, slices: list) -> dict:
        """What a shard task returns of its shard (shards/shard.py save_matchers)."""
        idx, L = self.index, self.L
        tables = [idx.bitmask_table] + list(idx.bloom_tables)
        union = np.zeros(slices[-1].stop, np.uint64)
        for t, ids in enumerate(self.partitions(1)[1]):
            union[slices[t]] = np.bitwise_or.reduce(np.asarray(tables[t])[ids], axis=0)
        tokens = np.asarray(idx.child_tokens)
        (a1, b1) = self.nodes[1]
        return {"sids": self.sids[1] - self.sids[0], "ads": self.rows[1] - self.rows[0],
                "levels": [b - a for a, b in self.nodes[1:]],
                "max_degree": [0] + [int(np.diff(_span(idx.node_offsets, a, b + 1)).max()) for a, b in self.nodes[1:L]],
                "union": union, "first_token": int(tokens[a1 - 1]), "last_token": int(tokens[b1 - 2])}

    def load(self, name: str) -> np.ndarray:
        """The piece `name` of a shard task's directory, cut from the index."""
        idx = self.index
        ra, rb = self.rows
        m = _LEVEL.fullmatch(name)
        if m:
            kind, d, t = m.group(1), int(m.group(2)), int(m.group(3) or 0)
            a, b = self.nodes[d]
            if kind == "tokens":
                return np.asarray(idx.child_tokens)[a - 1:b - 1]
            if kind == "degrees":
                return np.diff(_span(idx.node_offsets, a, b + 1))
            counts, ids = self.partitions(d)
            return counts if kind == "counts" else ids[t]
        if name == "sid_ad_offsets":
            return np.asarray(idx.sid_ad_offsets)[self.sids[0]:self.sids[1] + 1]
        if name == "sid_ad_ids":
            return np.asarray(idx.sid_ad_ids)[ra:rb]
        if name == "input_rows":
            return np.arange(ra, rb, dtype=np.int64)
        if name == "ad_ids0":
            return np.asarray(idx.ad_bitmask_ids)[ra:rb]
        kind, b, part = _list_name(name)
        off, codes = (idx.ad_allow if kind == "allowed" else idx.ad_exclude)[b]
        off = np.asarray(off)
        return off[ra:rb + 1] if part == "offsets" else np.asarray(codes)[int(off[ra]):int(off[rb])]


_LEVEL = re.compile(r"(tokens|degrees|counts|ids)(\d+)(?:_(\d+))?")  # tokens2, ids3_1: a level's pieces
_LISTS = re.compile(r"ad_(allowed|excluded)(\d+)_(offsets|codes)")


def _list_name(name: str) -> tuple:
    """'ad_allowed2_codes' -> ('allowed', 2, 'codes')."""
    m = _LISTS.fullmatch(name)
    if m is None:
        raise KeyError(name)
    return m.group(1), int(m.group(2)), m.group(3)


class RebuildPieces:
    """The shards of a rebuild: runs kept from the index (cut) and runs built anew (their task's files)."""

    def __init__(self, landed: list, index, shards: list):
        self.files = ShardFiles(landed, 1 + len(index.bloom))
        self.shards = shards  # per shard: a Run, or None where a task built it
        self.base = [index.bitmask_table] + list(index.bloom_tables)

    def load(self, s: int, name: str) -> np.ndarray:
        run = self.shards[s]
        return self.files.load(s, name) if run is None else run.load(name)

    def tables(self, s: int) -> tuple:
        # every kept run's ids are rows of the index's tables: one remap serves them all
        return ("index", self.base) if self.shards[s] is not None else self.files.tables(s)
