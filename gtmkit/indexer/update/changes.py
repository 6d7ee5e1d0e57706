"""An update's changed ads: rows in the catalog's schema, read and validated as a catalog is (inputs/catalog.py),
then put in the terms of the index they update: each ad's leaf (or -1 where its SID is not in the trie), its
combined targeting row in the index's bit layout, and its Bloom string lists in the index's codes, strings the
index never met getting the next free codes (in their sorted order: the index's codes are all kept)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..._arrays import read_only
from ...errors import CatalogError
from ...inputs.catalog import open_catalog, read_catalog
from ...inputs.schema import parse_schema
from ...artifact.writes import WriteError, writing
from ..adindex import reorder_lists
from ..rows import rows_in_layout
from ..verify import walk


@dataclass
class Changes:
    """n changed ads in input order. ad_ids int64 [n]; sids int64 [n, L]; leaves int64 [n] (-1: the SID has no
    path in the trie);
    rows uint64 [n, width] (bitmask words, then each Bloom attribute's); allow / exclude: per Bloom attribute
    (offsets int64 [n+1], codes int32) sorted distinct index codes; dictionaries: per Bloom attribute the
    index's {string: code}, or a larger copy when the changes brought new strings."""

    ad_ids: np.ndarray
    sids: np.ndarray
    leaves: np.ndarray
    rows: np.ndarray
    allow: list
    exclude: list
    dictionaries: list

    @property
    def size(self) -> int:
        return len(self.ad_ids)


def read_changes(index, changes, progress=None) -> Changes:
    """changes: a Parquet file, directory or glob in the index's catalog schema, or a pyarrow Table of such rows.
    Every row is validated as a build does (one CatalogError naming the column and row); a bitmask value outside
    the index's domain is refused too, since a row in another layout cannot be added without a build."""
    schema = parse_schema(index.manifest["schema"])
    if hasattr(changes, "schema") and hasattr(changes, "num_rows"):  # a pyarrow Table
        import pyarrow.parquet as pq
        try:
            with tempfile.TemporaryDirectory(prefix="gtmkit-changes-") as tmp:
                path = Path(tmp) / "changes.parquet"
                with writing(path, changes.nbytes):
                    pq.write_table(changes, path)
                try:
                    cat = _read(path, schema, progress)
                except CatalogError as exc:
                    raise CatalogError(str(exc).replace(str(path), "changes table")) from None
        except WriteError as exc:  # the temporary folder is full: said of it once the file is gone, in one line
            raise exc.at(Path(tmp).parent) from None
    else:
        cat = _read(changes, schema, progress)
    if cat is None:  # an empty change set (a period without changes): nothing to apply
        return _no_changes(index)
    n = cat.num_ads
    sids = cat.sids.astype(np.int64)
    leaves = walk(read_only(index.node_offsets, np.int64), read_only(index.child_tokens), sids)
    rows = rows_in_layout(cat, schema, index.layout, [b["words"] for b in index.bloom], np.arange(n))
    nbm = len(schema.bitmask)
    allow, exclude, dictionaries = [], [], []
    for b, d in enumerate(index.bloom_dictionaries):
        strings = cat.allowed[nbm + b].dictionary  # excluded lists share it
        new = [s for s in strings if s not in d]
        if new:
            d = dict(d)
            for s in new:
                d[s] = len(d)
        remap = np.array([d[s] for s in strings] + [-1], np.int32)
        coded = []
        for lists in (cat.allowed[nbm + b], cat.excluded[nbm + b]):
            codes = remap[lists.codes] if len(lists.codes) else np.zeros(0, np.int32)
            coded.append(reorder_lists(lists.offsets, codes, np.arange(n)))
        allow.append(coded[0])
        exclude.append(coded[1])
        dictionaries.append(d)
    return Changes(np.asarray(cat.ad_ids, np.int64), sids, leaves, rows, allow, exclude, dictionaries)


def _read(path, schema, progress):
    """The changes as a Catalog, or None when the input's columns are right but it has no rows."""
    if open_catalog(path, schema).num_rows == 0:
        return None
    return read_catalog(path, schema, progress)


def _no_changes(index) -> Changes:
    width = index.layout.words + sum(b["words"] for b in index.bloom)
    empty = (np.zeros(1, np.int64), np.zeros(0, np.int32))
    nb = len(index.bloom)
    return Changes(np.zeros(0, np.int64), np.zeros((0, index.sid_length), np.int64), np.zeros(0, np.int64),
                   np.zeros((0, width), np.uint64), [empty] * nb,
                   [empty] * nb, list(index.bloom_dictionaries))
