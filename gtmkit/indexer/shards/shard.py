"""A sharded build's second phase: one task a range of first tokens gathers its rows from every file's piece,
builds that part of the trie, its ads' rows, the matchers of its nodes at depths 1..L (deduplicated within
the shard) and its ads' lists, and returns them (or keeps them in staging) for the assembler."""

from __future__ import annotations

import numpy as np

from ..._arrays import join_offsets
from ...inputs.catalog import Catalog, StringLists
from ..adindex import reorder_lists, sid_ad_map
from ..levels import level_parts
from ..dedup import RowDeduper, add_columns
from ..partition import level_partitions
from ..rows import ad_rows, resolve_layout
from ..trie import build_trie
from .split import ARRAYS, part_rows
from ...sharding.pieces import Writer


def gather(parts: list, starts: list, schema, dictionaries: list, remaps: list) -> tuple:
    """(the rows of a shard as a Catalog with the global dictionaries, their rows in the whole input). parts: per
    file its cut (split.cut); remaps[j][i]: file i's codes of attribute j -> the global dictionary's."""
    n_attrs = len(schema.bitmask) + len(schema.bloom)
    cols = {name: [] for name in ARRAYS}
    lists = {(kind, j): [] for kind in ("allowed", "excluded") for j in range(n_attrs)}
    for i, part in enumerate(parts):
        got = part_rows(part, schema.vocab, n_attrs)
        if len(got["ad_ids"]) == 0:
            continue
        for name in ARRAYS:
            cols[name].append(np.asarray(got[name]))
        cols["rows"][-1] = cols["rows"][-1] + starts[i]
        for (kind, j), acc in lists.items():
            codes = np.asarray(got[f"{kind}{j}_codes"])
            acc.append((np.asarray(got[f"{kind}{j}_offsets"]),
                        remaps[j][i][codes] if len(codes) else np.zeros(0, np.int32)))
    ad_ids, sids, rows = (np.concatenate(cols[name]) for name in ARRAYS)
    out = {}
    for (kind, j), acc in lists.items():
        codes = np.concatenate([c for _, c in acc]).astype(np.int32, copy=False)
        out[kind, j] = StringLists(join_offsets([o for o, _ in acc]), codes, dictionaries[j])
    cat = Catalog("shard", ad_ids, np.ascontiguousarray(sids), [out["allowed", j] for j in range(n_attrs)],
                  [out["excluded", j] for j in range(n_attrs)])
    return cat, rows


def build_shard(parts: list, s: int, lo: int, hi: int, starts: list, schema, dictionaries: list, remaps: list,
                staging: str | None) -> dict:
    """Builds shard s (keys lo..hi-1, plan.py) from its cuts of the files' pieces (gather). -> {"meta": its sizes and
    its SIDs' union, "piece": its arrays, returned (staging None) or kept in staging/shard-s}.

    A shard that begins or ends inside a first token may hold part of that depth-1 node only: its matchers
    need all of the node's SIDs, so the shard keeps the union rows of its part of the node (split_first_rows,
    split_last_rows) for the assembler, which partitions the whole node when another shard holds the rest."""
    cat, input_rows = gather(parts, starts, schema, dictionaries, remaps)
    del parts
    V = schema.vocab
    trie = build_trie(cat.sids, V)
    order, sid_ad_offsets, sid_ad_ids, _, _ = sid_ad_map(trie.ad_sid, cat.ad_ids, trie.num_sids)
    del trie.ad_sid
    layout, code_bits, rl = resolve_layout(cat, schema)
    rows = ad_rows(cat, schema, layout, code_bits, rl, order)
    out = Writer(staging, f"shard-{s:05d}")
    nbm = len(schema.bitmask)
    lists = [((al.offsets, al.codes), (ex.offsets, ex.codes))
             for al, ex in zip(cat.allowed[nbm:], cat.excluded[nbm:])]
    save_ads(out, order, sid_ad_offsets, sid_ad_ids, input_rows, lists)
    del cat, lists
    meta = save_matchers(out, trie, rows, sid_ad_offsets, schema, rl, lo % V != 0, hi % V != 0 and hi < V * V)
    return {"meta": meta, "piece": out.done()}


def save_ads(out: Writer, order, sid_ad_offsets, sid_ad_ids, input_rows, lists: list) -> None:
    """A shard's SID->ad map, its rows' places in the input and its ads' Bloom lists (per attribute: (allowed,
    excluded), each (offsets, codes) in input order) into its Writer, in SID order."""
    save = out.save
    save("sid_ad_offsets", sid_ad_offsets)
    save("sid_ad_ids", sid_ad_ids)
    save("input_rows", input_rows[order])
    for b, pair in enumerate(lists):
        for kind, (offsets, codes) in zip(("allowed", "excluded"), pair):
            off, codes = reorder_lists(offsets, codes, order)
            save(f"ad_{kind}{b}_offsets", off)
            save(f"ad_{kind}{b}_codes", codes)


def save_matchers(out: Writer, trie, rows, sid_ad_offsets, schema, rl, split_first: bool, split_last: bool) -> dict:
    """A shard's trie levels and matchers (rows: its ads' combined rows in SID order) into its Writer; returns its
    sizes and its SIDs' union (the shard's meta)."""
    spec, L = schema.partition, schema.sid_length
    S, N = trie.num_sids, len(rows)
    slices = rl.slices()
    save = out.save
    dedupers = [RowDeduper(x.stop - x.start) for x in slices]
    save("ad_ids0", dedupers[0].add(rows[:, slices[0]]))
    _, sid_rows = level_partitions(rows, sid_ad_offsets[:-1], sid_ad_offsets[1:])
    union = np.bitwise_or.reduce(sid_rows, axis=0)
    starts1, ends1 = trie.sid_ranges(1)
    if split_first:
        save("split_first_rows", sid_rows[starts1[0]:ends1[0]])
    if split_last:
        save("split_last_rows", sid_rows[starts1[-1]:ends1[-1]])
    levels, max_degree = [], [0] * L
    degrees = np.diff(trie.node_offsets.astype(np.int64))
    for d in range(1, L + 1):
        a, b = int(trie.level_offsets[d]), int(trie.level_offsets[d + 1])
        levels.append(b - a)
        save(f"tokens{d}", trie.child_tokens[a - 1:b - 1])
        if d < L:
            save(f"degrees{d}", degrees[a:b])
            max_degree[d] = int(degrees[a:b].max())
        counts, parts = level_parts(spec, d, trie, rows, sid_rows, sid_ad_offsets, rl)
        save(f"counts{d}", counts)
        for t, ids in enumerate(add_columns(dedupers, parts, slices)):
            save(f"ids{d}_{t}", ids)
        del parts
    for t, dd in enumerate(dedupers):
        save(f"table{t}", dd.table())
    return {"sids": S, "ads": N, "levels": levels, "max_degree": max_degree, "union": union,
            "first_token": int(trie.child_tokens[0]), "last_token": int(trie.child_tokens[levels[0] - 1])}
