"""A loaded GTM index: trie navigation, request encoding, GTM node test and exact ad eligibility.

Arrays are memory-mapped from the artifact directory; see docs/format.md for every array."""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from itertools import islice
from pathlib import Path

import numpy as np

from ._arrays import read_only
from .errors import ArtifactError, GtmkitError, RequestError
from .artifact import index_format as fmt
from .artifact.container import open_artifact
from .artifact.index_checks import PAUSED, index_problems
from .targeting import exact
from .progress import Progress
from .targeting.semantics import (BitmaskLayout, Request, check_request, encode_request, row_passes,
                                  wide_attributes)


class Index:
    """GTM index (docs/design.md §3). Node ids are BFS: root 0, then depth 1, 2, ..., L (the leaves)."""

    root = 0

    def __init__(self, artifact):
        self.artifact = artifact
        self.path = artifact.path if isinstance(artifact.path, str) else Path(artifact.path)  # a URL stays one
        self.manifest = artifact.manifest
        c = self.manifest["counts"]
        self.num_sids, self.num_ads, self.num_nodes = c["sids"], c["ads"], c["nodes"]
        self.sid_length, self.vocab_size = c["sid_length"], c["vocab"]
        self.layout = BitmaskLayout.from_dict(self.manifest["bitmask_layout"])
        self.bloom = self.manifest["bloom"]
        self.partition_layout = self.manifest["partition_layout"]
        a = artifact.array
        self.level_offsets = np.asarray(a("level_offsets"))
        self.node_offsets, self.child_tokens = a("node_offsets"), a("child_tokens")
        self.max_degree = np.asarray(a("max_degree"))
        self.part_bitmask_ids = a("part_bitmask_ids")
        self.part_bloom_ids = a("part_bloom_ids") if self.bloom else np.zeros((len(self.part_bitmask_ids), 0), np.int32)
        self.part_offsets = a("part_offsets") if self.partition_layout["kind"] == "jagged" else None
        self.bitmask_table = a("bitmask_table")
        self.bloom_tables = [a(fmt.bloom_table(b)) for b in range(len(self.bloom))]
        self.sid_ad_offsets, self.sid_ad_ids = a("sid_ad_offsets"), a("sid_ad_ids")
        self.ad_bitmask_ids = a("ad_bitmask_ids")
        self.ad_ids_sorted, self.ad_rows_by_id = a("ad_ids_sorted"), a("ad_rows_by_id")
        # ads served paused from the first call (`gtmkit update --pause`; a Matcher's later pauses are its own)
        self.paused_ad_ids = np.asarray(a(PAUSED)) if PAUSED in artifact.names else np.zeros(0, np.int64)
        self.ad_allow = [tuple(a(n) for n in fmt.ad_allow(b)) for b in range(len(self.bloom))]
        self.ad_exclude = [tuple(a(n) for n in fmt.ad_exclude(b)) for b in range(len(self.bloom))]
        self._exact_lists = None
        self._version = None  # an updated index's (indexer/update: the artifact's, then +n)
        updated = fmt.update_state(self.manifest)["updates"] > 0
        # SIDs an update left without ads: a matcher prunes them through its live counts (design.md §9)
        self.empty_sids = int(np.count_nonzero(np.diff(self.sid_ad_offsets) == 0)) if updated else 0

    @property
    def version(self) -> str:
        """Which version of the artifact this is: its version directory's name (a rebuild or an update writes a
        new one), or for a flat artifact its manifest digest; an index updated in memory adds "+n" (its n-th
        update). Results of a Matcher carry it."""
        if self._version is not None:
            return self._version
        d = self.artifact.dir
        if d != self.path:
            return d.name
        return str(self.manifest.get("manifest_sha256", ""))[:16] or self.path.name

    # --- trie -------------------------------------------------------------------------------
    @property
    def first_leaf(self) -> int:
        return int(self.level_offsets[self.sid_length])

    def depth(self, node: int) -> int:
        node = self._check_node(node)
        return int(np.searchsorted(self.level_offsets, node, side="right") - 1)

    def _check_node(self, node: int) -> int:
        node = _int_id(node, "node")  # a string or float node compares or indexes wrongly below
        if not 0 <= node < self.num_nodes:
            raise GtmkitError(f"node {node} outside [0, {self.num_nodes})")
        return node

    def children(self, node: int) -> tuple:
        """(tokens int32 [deg], child node ids int32 [deg]) of a node; empty for a leaf."""
        node = self._check_node(node)
        if node >= self.first_leaf:
            return np.zeros(0, np.int32), np.zeros(0, np.int32)
        a, b = int(self.node_offsets[node]), int(self.node_offsets[node + 1])
        return np.asarray(self.child_tokens[a:b], np.int32), np.arange(a + 1, b + 1, dtype=np.int32)

    def child(self, node: int, token: int) -> int:
        """Child of node reached by token, or -1."""
        node = self._check_node(node)
        token = _int_id(token, "token")
        if node >= self.first_leaf:
            return -1
        if not 0 <= token < self.vocab_size:  # (also keeps ids past int64 out of searchsorted)
            return -1
        a, b = int(self.node_offsets[node]), int(self.node_offsets[node + 1])
        j = a + int(np.searchsorted(self.child_tokens[a:b], token))
        return j + 1 if j < b and int(self.child_tokens[j]) == token else -1

    def parent(self, node: int) -> int:
        node = self._check_node(node)
        if node == 0:
            return -1
        return int(np.searchsorted(self.node_offsets, node - 1, side="right") - 1)

    def find(self, sid) -> int:
        """Node of a SID or SID prefix (sequence of integer tokens), or -1."""
        if isinstance(sid, (str, bytes)) or not hasattr(sid, "__iter__"):  # "12" would read as tokens 1, 2
            raise RequestError(f"sid must be a sequence of integer tokens, got {sid!r:.60}")
        node = 0
        for t in sid:
            node = self.child(node, t)
            if node < 0:
                return -1
        return node

    def leaf_sid(self, node: int) -> tuple:
        """The SID (tuple of L ints) of a leaf node."""
        node = _int_id(node, "node")
        if not self.first_leaf <= node < self.num_nodes:
            raise GtmkitError(f"node {node} is not a leaf (leaves are {self.first_leaf}..{self.num_nodes - 1})")
        out = []
        while node > 0:
            out.append(int(self.child_tokens[node - 1]))
            node = self.parent(node)
        return tuple(reversed(out))

    def sid_ads(self, leaf_node: int) -> np.ndarray:
        """int64 ad ids of a leaf's SID (ascending)."""
        leaf_node = _int_id(leaf_node, "leaf_node")
        if not self.first_leaf <= leaf_node < self.num_nodes:
            raise GtmkitError(f"node {leaf_node} is not a leaf")
        s = leaf_node - self.first_leaf
        return np.asarray(self.sid_ad_ids[self.sid_ad_offsets[s]:self.sid_ad_offsets[s + 1]], np.int64)

    # --- matchers ---------------------------------------------------------------------------
    def node_partitions(self, node: int) -> np.ndarray:
        """Indices into part_bitmask_ids / part_bloom_ids of the node's partitions (padding dropped)."""
        node = self._check_node(node)
        if self.part_offsets is not None:
            idx = np.arange(int(self.part_offsets[node]), int(self.part_offsets[node + 1]))
        else:
            d = self.depth(node)
            w = self.partition_layout["level_width"][d]
            base = self.partition_layout["level_base"][d] + (node - int(self.level_offsets[d])) * w
            idx = np.arange(base, base + w)
        return idx[np.asarray(self.part_bitmask_ids[idx]) >= 0]

    def partition_ranges(self) -> tuple:
        """(start, end) int64 [num_nodes]: node n's partitions are indices start[n]:end[n] (fixed layouts
        may hold -1 padding there)."""
        if self.part_offsets is not None:
            po = np.asarray(self.part_offsets, np.int64)
            return po[:-1].copy(), po[1:].copy()
        lo = self.level_offsets
        w = np.asarray(self.partition_layout["level_width"], np.int64)
        base = np.asarray(self.partition_layout["level_base"], np.int64)
        depth = np.repeat(np.arange(len(lo) - 1), np.diff(lo))
        start = base[depth] + (np.arange(self.num_nodes) - lo[depth]) * w[depth]
        return start, start + w[depth]

    def _check_request(self, request) -> Request:
        return check_request(self.follow(request), 0, len(self.layout.names), self.layout.words,
                             [t.shape[1] for t in self.bloom_tables])

    def node_passes(self, node: int, request: Request) -> bool:
        """GTM test (docs/design.md §2) on the node's stored matchers: passes iff any partition passes. Node -1
        (an absent node, as in padded node lists) passes nothing."""
        node = _int_id(node, "node")
        request = self._check_request(request)
        if node == -1:
            return False
        for p in self.node_partitions(node):
            bm = self.bitmask_table[self.part_bitmask_ids[p]]
            blooms = [self.bloom_tables[b][self.part_bloom_ids[p, b]] for b in range(len(self.bloom))]
            if row_passes(bm, blooms, request):
                return True
        return False

    # --- requests and exact eligibility ----------------------------------------------------
    @cached_property
    def bloom_dictionaries(self) -> list:
        """Per Bloom attribute: {string: code} over every string the catalog mentions."""
        out = []
        for b in range(len(self.bloom)):
            values = self.artifact.table(fmt.bloom_dict(b)).column("value").to_pylist()
            out.append({s: i for i, s in enumerate(values)})
        return out

    @cached_property
    def fingerprint(self) -> str:
        """What a request encoded against this index depends on: the bit layout, the Bloom parameters and the string
        dictionaries (their members' checksums; an update that appends strings extends it, indexer/update). Two
        indexes with one fingerprint encode every user identically (docs/design.md §9)."""
        files = self.manifest.get("files", {})
        dicts = [str(files.get(fmt.bloom_dict(b), {}).get("sha256")) for b in range(len(self.bloom))]
        return encoding_fingerprint(self.layout, self.bloom, dicts)

    def encode_request(self, user: dict) -> Request:
        """user: attribute -> value or list of values, e.g. {"country": "US", "location": ["US", "US:CA"]}.
        The request records this index's fingerprint and a copy of the attributes (see follow)."""
        lookups = [lambda vals, d=d: [d.get(s, -1) for s in vals] for d in self.bloom_dictionaries]
        return encode_request(user, self.layout, [(b["bits"], b["hashes"], b["seed"]) for b in self.bloom],
                              [b["name"] for b in self.bloom], lookups, self.fingerprint)

    def follow(self, request):
        """The request as this index encodes it: one encoded against another fingerprint (an index before a swap,
        update or rebuild) is encoded again from the attributes it records, so its bits and codes are this
        index's; any other input is returned as it is (a request made by hand is taken as encoded here)."""
        fp = getattr(request, "fingerprint", None) if isinstance(request, Request) else None
        if fp is None or fp == self.fingerprint:
            return request
        if not isinstance(request.user, dict):
            raise RequestError("a request encoded for another index carries no attributes to encode it again")
        return self.encode_request(request.user)

    def ad_rows(self, ad_ids) -> np.ndarray:
        """Ad-level row (position in sid_ad_ids) of each ad id; RequestError for unknown ids and for ids
        that are not int64 integers."""
        ad_ids = int64_ids(ad_ids, "ad id")
        sorted_ids = self.ad_ids_sorted
        # looked up in ascending order, each search starting where the last ended (random ids each missed the
        # cache all the way down)
        order = np.argsort(ad_ids, kind="stable")
        pos = np.empty(len(ad_ids), np.int64)
        pos[order] = np.searchsorted(sorted_ids, ad_ids[order])
        pos_c = np.minimum(pos, len(sorted_ids) - 1)
        bad = sorted_ids[pos_c] != ad_ids
        if bad.any():
            raise RequestError(f"unknown ad id {int(ad_ids[np.flatnonzero(bad)[0]])}")
        rows = np.empty(len(ad_ids), np.int64)
        rows[order] = self.ad_rows_by_id[pos_c[order]]
        return rows

    def eligible_rows(self, rows: np.ndarray, request: Request) -> np.ndarray:
        """Exact eligibility of ad-level rows (each in [0, num_ads)) -> bool array."""
        rows = int64_ids(rows, "ad row")
        outside = (rows < 0) | (rows >= self.num_ads)
        if outside.any():
            raise RequestError(f"ad row {int(rows[np.flatnonzero(outside)[0]])} outside [0, {self.num_ads})")
        request = self._check_request(request)
        out = np.zeros(len(rows), bool)
        code_off, codes = exact.request_codes(request.bloom_codes)
        exact.rows_eligible(rows, read_only(self.ad_bitmask_ids, np.int32),
                            read_only(np.ascontiguousarray(self.bitmask_table)),
                            *self.exact_lists(), np.ascontiguousarray(request.bitmask)[None], code_off, codes, 0, out)
        return out

    def exact_lists(self) -> tuple:
        """(allow_off, allow_codes, excl_off, excl_codes): the ads' Bloom lists stacked one attribute a
        row, as the exact kernel reads them (built once, shared with the matcher)."""
        lists = self._exact_lists
        if lists is None:  # two threads racing here build equal tuples: no lock needed
            lists = (*exact.stack_lists(self.ad_allow, self.num_ads), *exact.stack_lists(self.ad_exclude, self.num_ads))
            lists = self._exact_lists = tuple(read_only(x) for x in lists)
        return lists

    def ad_eligible(self, ad_ids, request: Request) -> np.ndarray:
        """Exact eligibility (docs/design.md §2) of each ad id -> bool array."""
        return self.eligible_rows(self.ad_rows(ad_ids), request)

    # --- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Release the artifact version this index reads (idempotent); a rebuild of the path deletes it
        at its next write. Also done by ``with load_index(...) as index:`` and garbage collection."""
        self.artifact.close()

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- reporting ---------------------------------------------------------------------------
    def stats(self) -> dict:
        s = dict(self.manifest.get("stats", {}))
        s["path"] = str(self.path)
        s["format"] = {"name": self.manifest["format"], "version": self.manifest["format_version"],
                       "gtmkit_version": self.manifest.get("gtmkit_version")}
        s["artifact_bytes"] = int(self.artifact.nbytes)
        s["ads"] = self.num_ads  # the level and table figures stay the build's; counts follow updates
        u = fmt.update_state(self.manifest)
        s["updates"] = {"applied": u["updates"], "ads_added": u["added"], "slack_ads": u["slack_ads"],
                        "slack_left": u["slack_ads"] - u["added"], "paused_ads": int(len(self.paused_ad_ids))}
        wide = wide_attributes(self.layout)
        if wide:
            s["wide_bitmask"] = wide
        build = self.manifest.get("build")
        if isinstance(build, dict) and build.get("rebuilt") is not None:
            s["rebuilt"] = build["rebuilt"]  # the last shard rebuild (indexer/update/rebuild.py)
        return s

    def __repr__(self) -> str:
        return (f"Index({str(self.path)!r}, sids={self.num_sids}, ads={self.num_ads}, "
                f"L={self.sid_length}, V={self.vocab_size}, partition={self.partition_layout['kind']})")


def encoding_fingerprint(layout: BitmaskLayout, bloom: list, dictionaries: list) -> str:
    """16 hex digits over the layout's attributes and domains, each Bloom attribute's parameters, and one digest per
    string dictionary."""
    text = json.dumps({"layout": layout.to_dict(), "bloom": [[b["name"], b["bits"], b["hashes"], b["seed"]]
                                                             for b in bloom], "dictionaries": list(dictionaries)},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def extended_fingerprint(fingerprint: str, before: list, after: list) -> str:
    """The fingerprint of an index whose string dictionaries `after` extend `before` (codes kept, strings appended):
    the old one when nothing was appended."""
    added = [list(islice(reversed(a), len(a) - len(b)))[::-1] for b, a in zip(before, after)]
    if not any(added):
        return fingerprint
    text = json.dumps([fingerprint, added], separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _int_id(x, what: str) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise RequestError(f"{what} must be an integer, got {x!r}")
    return int(x)


def int64_ids(x, what: str) -> np.ndarray:
    """1-d int64 of integer ids; floats, bools, strings and ids beyond int64 refused with the first of them."""
    try:
        a = np.asarray(x)
    except (TypeError, ValueError, OverflowError) as e:
        raise RequestError(f"{what}s must be integers ({e})") from None
    a = a.reshape(-1)
    if a.size == 0:
        return np.zeros(0, np.int64)
    if a.dtype.kind == "u" and a.max() > np.iinfo(np.int64).max:
        raise RequestError(f"{what} {int(a[np.argmax(a > np.iinfo(np.int64).max)])} does not fit int64")
    if a.dtype.kind not in "iu":
        bad = [v for v in a.tolist() if isinstance(v, bool) or not isinstance(v, int) or not -2**63 <= v < 2**63]
        if a.dtype.kind != "O" or bad:  # an object array of Python ints that fit is taken
            bad = bad[0] if bad else a.flat[0]
            raise RequestError(f"{what}s must be int64 integers, got {bad!r} ({a.dtype})")
    return np.ascontiguousarray(a, np.int64)


def load_index(path, verify: bool = True, progress: Progress = None, cache=None) -> Index:
    """Open an index directory (memory-mapped, every member opened now, the version held until
    close()); ArtifactError (one line) for anything it would not serve.

    verify=True (any index, also one you did not build): the manifest digest, every file's sha256, every
    manifest field against the schema and the arrays, and every invariant the matcher kernels rely on.
    verify=False is for artifacts you produced: the format version, the manifest digest, file sizes, dtypes
    and shapes against the counts, and the O(1) offset / layout cross-checks (docs/format.md).

    An object-store URL (s3://bucket/prefix, ...) is read through the local folder `cache` (default
    $XDG_CACHE_HOME/gtmkit/artifacts): the version its pointer names is downloaded unless there already, checked
    on arrival, older cached versions pruned, then memory-mapped as a local index (docs/format.md)."""
    art = open_artifact(path, fmt.FORMAT_NAME, fmt.SUPPORTED_VERSIONS, verify=verify, progress=progress, cache=cache)
    for problem in index_problems(art, full=verify):
        art.close()  # release the version's reader lock: a refused index holds nothing
        raise ArtifactError(problem)
    return Index(art)
