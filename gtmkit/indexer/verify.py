"""`gtmkit verify`: the container (manifest digest, sizes, checksums), every invariant load_index checks,
matcher coverage and (with the catalog) a full recomputation.

Returns a list of one-line problems; an empty list means the index is sound."""

from __future__ import annotations

import numpy as np
from numba import prange

from .._arrays import read_only
from .._bits import lower_bound
from ..errors import ArtifactError, CatalogError
from ..threads import parallel_njit
from ..artifact import index_format as fmt
from ..artifact.container import open_artifact, verify_artifact
from ..inputs.catalog import read_catalog
from ..artifact.index_checks import index_problems
from ..inputs.schema import parse_schema, resolve_schema
from ..progress import Progress, report
from .adindex import reorder_lists
from .rows import rows_in_layout


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
            a = lower_bound(child_tokens, node_offsets[node], node_offsets[node + 1], t)
            if a < node_offsets[node + 1] and child_tokens[a] == t:
                node = a + 1
            else:
                node = -1
                break
        out[i] = node
    return out


def coverage_problems(idx) -> list:
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
    leaves = walk(read_only(idx.node_offsets, np.int64), read_only(idx.child_tokens), cat.sids.astype(np.int64))
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
    held = int(np.count_nonzero(np.diff(np.asarray(idx.sid_ad_offsets))))  # an update may leave a SID without ads
    if n_sids != held:
        P.append(f"catalog has {n_sids} distinct SIDs, index {held} holding ads")
    layout = idx.layout
    order = np.empty(idx.num_ads, np.int64)
    order[rows] = np.arange(idx.num_ads)  # catalog row of each ad-level row
    try:
        recomputed = rows_in_layout(cat, schema, layout, [b["words"] for b in idx.bloom], order)[:, :layout.words]
    except CatalogError as exc:  # a value outside the index's domain
        return P + [str(exc)]
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


def verify_index(path, catalog=None, schema=None, progress: Progress = None, cache=None) -> list:
    """Every problem, one line each: all the container's, then (when its arrays can be read, even with a
    checksum mismatch) all invariant problems, then coverage and the catalog once those are clean."""
    from ..index import Index
    try:  # one version throughout: a rebuild of the path while this runs must not mix two
        art = open_artifact(path, fmt.FORMAT_NAME, fmt.SUPPORTED_VERSIONS, verify=False, cache=cache)
    except ArtifactError as e:  # the manifest or a file cannot be trusted to read the arrays
        try:
            return verify_artifact(path, fmt.FORMAT_NAME, fmt.SUPPORTED_VERSIONS, progress, cache) or [str(e)]
        except ArtifactError as again:  # not even a version to check (e.g. a broken version pointer)
            return [str(again)]
    try:
        P = verify_artifact(art.dir, fmt.FORMAT_NAME, fmt.SUPPORTED_VERSIONS, progress)
        P += index_problems(art, full=True)
        if P:
            return P
        idx = Index(art)
        P = coverage_problems(idx)
        if not P and catalog is not None:
            P = catalog_problems(idx, catalog, schema, progress)
        return P
    finally:
        art.close()
