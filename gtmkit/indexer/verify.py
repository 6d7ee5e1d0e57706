"""`gtmkit verify`: checksums, structural invariants and (with the catalog) a full recomputation.

Returns a list of one-line problems; an empty list means the index is sound."""

from __future__ import annotations

import numpy as np
from numba import prange

from ..threads import parallel_njit
from ..formats import index_format as fmt
from ..formats.artifact import verify_artifact
from ..formats.catalog import read_catalog
from ..formats.schema import parse_schema, resolve_schema
from ..progress import Progress, report
from .adindex import reorder_lists
from .rows import RowLayout, ad_rows


@parallel_njit(cache=True)
def node_unions(part_start, part_end, part_ids, table):
    """uint64 [n_nodes, W]: OR of the table rows of each node's partitions (ids < 0 are padding)."""
    out = np.zeros((part_start.shape[0], table.shape[1]), np.uint64)
    for n in prange(part_start.shape[0]):
        for p in range(part_start[n], part_end[n]):
            r = part_ids[p]
            if r >= 0:
                for w in range(table.shape[1]):
                    out[n, w] |= table[r, w]
    return out


@parallel_njit(cache=True)
def uncovered(owner, rows, unions):
    """bad[i]: rows[i] has a bit that unions[owner[i]] lacks."""
    bad = np.zeros(rows.shape[0], np.bool_)
    for i in prange(rows.shape[0]):
        for w in range(rows.shape[1]):
            if rows[i, w] & ~unions[owner[i], w]:
                bad[i] = True
    return bad


@parallel_njit(cache=True)
def walk(node_offsets, child_tokens, sids):
    """Leaf node of each SID (rows of sids), -1 where the path leaves the trie."""
    out = np.full(sids.shape[0], -1, np.int64)
    n_internal = node_offsets.shape[0] - 1
    for i in prange(sids.shape[0]):
        node = 0
        for t in sids[i]:
            if node >= n_internal:
                node = -1
                break
            a, b = node_offsets[node], node_offsets[node + 1]
            while a < b:
                m = (a + b) >> 1
                if child_tokens[m] < t:
                    a = m + 1
                else:
                    b = m
            if a < node_offsets[node + 1] and child_tokens[a] == t:
                node = a + 1
            else:
                node = -1
                break
        out[i] = node
    return out


def structure_problems(idx) -> list:
    P = []
    lo, no, ct = idx.level_offsets, np.asarray(idx.node_offsets), np.asarray(idx.child_tokens)
    L = idx.sid_length
    if lo[0] != 0 or lo[1] != 1 or np.any(np.diff(lo) <= 0) or lo[-1] != idx.num_nodes:
        P.append("level_offsets: not 0, 1, ... strictly increasing up to the node count")
    if len(no) != lo[L] + 1 or no[0] != 0 or no[-1] != idx.num_nodes - 1 or np.any(np.diff(no) <= 0):
        P.append("node_offsets: not monotone from 0 to the entry count, or an internal node without children")
        return P
    if len(ct) and int(ct.max()) >= idx.vocab_size:
        P.append(f"child_tokens: token {int(ct.max())} >= vocab {idx.vocab_size}")
    within = np.ones(len(ct), bool)
    within[no[:-1]] = False  # first entry of each node has no predecessor in the node
    if np.any((np.diff(ct.astype(np.int64), prepend=-1) <= 0) & within):
        P.append("child_tokens: not strictly increasing within a node")
    for name, ids, table in [("part_bitmask_ids", np.asarray(idx.part_bitmask_ids), idx.bitmask_table),
                             *[(f"part_bloom_ids[:, {b}]", np.asarray(idx.part_bloom_ids[:, b]), idx.bloom_tables[b])
                               for b in range(len(idx.bloom))]]:
        if len(ids) and (ids.min() < -1 or ids.max() >= len(table)):
            P.append(f"{name}: id outside [0, {len(table)})")
    if idx.part_offsets is not None:
        po = np.asarray(idx.part_offsets)
        if len(po) != idx.num_nodes + 1 or po[0] != 0 or np.any(np.diff(po) < 1) or po[-1] != len(idx.part_bitmask_ids):
            P.append("part_offsets: not monotone, or a node without partitions")
    so, sa = np.asarray(idx.sid_ad_offsets), np.asarray(idx.sid_ad_ids)
    if len(so) != idx.num_sids + 1 or so[0] != 0 or so[-1] != idx.num_ads or np.any(np.diff(so) < 1):
        P.append("sid_ad_offsets: not monotone from 0 to the ad count, or a SID without ads")
    srt = np.asarray(idx.artifact.array("ad_ids_sorted"))
    if np.any(np.diff(srt) <= 0):
        P.append("ad_ids_sorted: not strictly increasing (duplicate ad ids)")
    elif not np.array_equal(sa[np.asarray(idx.artifact.array("ad_rows_by_id"))], srt):
        P.append("ad_rows_by_id: does not map sorted ad ids to their rows")
    ab = np.asarray(idx.ad_bitmask_ids)
    if len(ab) and (ab.min() < 0 or ab.max() >= len(idx.bitmask_table)):
        P.append("ad_bitmask_ids: id outside the bitmask table")
    for b in range(len(idx.bloom)):
        n_dict = idx.artifact.table(fmt.bloom_dict(b)).num_rows
        for kind, (off, codes) in (("allow", idx.ad_allow[b]), ("exclude", idx.ad_exclude[b])):
            off, codes = np.asarray(off), np.asarray(codes)
            if len(off) != idx.num_ads + 1 or off[0] != 0 or off[-1] != len(codes) or np.any(np.diff(off) < 0):
                P.append(f"ad_{kind}_offsets_b{b}: malformed offsets")
            elif len(codes) and (codes.min() < 0 or codes.max() >= n_dict):
                P.append(f"ad_{kind}_codes_b{b}: code outside the dictionary")
    if P:
        return P
    P += _coverage_problems(idx)
    return P


def _coverage_problems(idx) -> list:
    """Each node's union covers its children's unions, and each leaf covers its ads' bitmask rows."""
    start, end = idx.partition_ranges()
    no = np.asarray(idx.node_offsets, np.int64)
    parent = np.repeat(np.arange(len(no) - 1), np.diff(no))  # parent of node j+1
    ad_leaf = idx.first_leaf + np.repeat(np.arange(idx.num_sids), np.diff(np.asarray(idx.sid_ad_offsets)))
    tables = [("bitmask", np.asarray(idx.part_bitmask_ids), idx.bitmask_table)]
    tables += [(f"bloom:{b['name']}", np.ascontiguousarray(idx.part_bloom_ids[:, i]), idx.bloom_tables[i])
               for i, b in enumerate(idx.bloom)]
    P = []
    for name, ids, table in tables:
        U = node_unions(start, end, ids, np.asarray(table))
        bad = uncovered(parent, U[1:], U)
        if bad.any():
            P.append(f"{name} matchers: {int(bad.sum())} node(s) not covered by their parent's union, "
                     f"e.g. node {int(np.flatnonzero(bad)[0]) + 1}")
        if name == "bitmask":
            ad_bm = np.asarray(idx.bitmask_table)[np.asarray(idx.ad_bitmask_ids)]
            if uncovered(ad_leaf, ad_bm, U).any():
                P.append("bitmask matchers: a leaf's union does not cover one of its ads' rows")
    return P


def catalog_problems(idx, catalog, schema=None, progress: Progress = None) -> list:
    """Recompute from the catalog: SID paths, each ad's SID, each ad's exact rows and string lists."""
    schema = resolve_schema(catalog, schema) if schema is not None else parse_schema(idx.manifest["schema"])
    cat = read_catalog(catalog, schema, progress)
    P = []
    if cat.num_ads != idx.num_ads:
        P.append(f"catalog has {cat.num_ads} ads, index {idx.num_ads}")
        return P
    leaves = walk(np.asarray(idx.node_offsets, np.int64), np.asarray(idx.child_tokens), cat.sids.astype(np.int64))
    if np.any(leaves < 0):
        i = int(np.flatnonzero(leaves < 0)[0])
        P.append(f"catalog row {i}: SID {tuple(int(t) for t in cat.sids[i])} has no path in the trie")
        return P
    try:
        rows = idx.ad_rows(cat.ad_ids)
    except Exception as exc:  # unknown ad id
        return P + [f"catalog ad ids differ from the index: {exc}"]
    held_by = np.searchsorted(np.asarray(idx.sid_ad_offsets), rows, side="right") - 1 + idx.first_leaf
    if np.any(held_by != leaves):
        i = int(np.flatnonzero(held_by != leaves)[0])
        P.append(f"catalog row {i}: ad {int(cat.ad_ids[i])} is not held by its SID's leaf")
    report(progress, 1, 3, "recompute")
    n_sids = len(np.unique(leaves))
    if n_sids != idx.num_sids:
        P.append(f"catalog has {n_sids} distinct SIDs, index {idx.num_sids}")
    layout = idx.layout
    code_bits = []
    for j, a in enumerate(schema.bitmask):
        bits = layout.value_bits(j)
        missing = [s for s in cat.allowed[j].dictionary if s not in bits]
        if missing:
            return P + [f"attribute '{a.name}': value {missing[0]!r} is not in the index's domain"]
        code_bits.append(np.array([bits[s] for s in cat.allowed[j].dictionary], np.int32))
    rl = RowLayout(layout.words, tuple(b["words"] for b in idx.bloom), 0)
    order = np.empty(idx.num_ads, np.int64)
    order[rows] = np.arange(idx.num_ads)  # catalog row of each ad-level row
    recomputed = ad_rows(cat, schema, layout, code_bits, rl, order)[:, :layout.words]
    stored = np.asarray(idx.bitmask_table)[np.asarray(idx.ad_bitmask_ids)]
    if not np.array_equal(recomputed, stored):
        r = int(np.flatnonzero(np.any(recomputed != stored, axis=1))[0])
        P.append(f"ad {int(idx.sid_ad_ids[r])}: stored bitmask row differs from the catalog's targeting")
    report(progress, 2, 3, "recompute")
    nbm = len(schema.bitmask)
    for b, spec in enumerate(idx.bloom):
        index_codes = idx.bloom_dictionaries[b]
        for kind, lists, stored_lists in (("allowed", cat.allowed[nbm + b], idx.ad_allow[b]),
                                          ("excluded", cat.excluded[nbm + b], idx.ad_exclude[b])):
            remap = np.array([index_codes.get(s, -1) for s in lists.dictionary] + [-1], np.int32)
            off, codes = reorder_lists(lists.offsets, remap[lists.codes] if len(lists.codes) else lists.codes, order)
            s_off, s_codes = (np.asarray(x) for x in stored_lists)
            if not (np.array_equal(off, s_off) and np.array_equal(codes, s_codes)):
                P.append(f"attribute '{spec['name']}': stored {kind} strings differ from the catalog's")
    report(progress, 3, 3, "recompute")
    return P


def verify_index(path, catalog=None, schema=None, progress: Progress = None) -> list:
    from ..index import load_index
    P = verify_artifact(path, fmt.FORMAT_NAME, fmt.SUPPORTED_VERSIONS, progress)
    if P:
        return P
    idx = load_index(path, verify=False)
    P = structure_problems(idx)
    if not P and catalog is not None:
        P = catalog_problems(idx, catalog, schema, progress)
    return P
