"""SuccinctTrie: a LOUDS trie over variable-length int32-token keys (FlashTrie; docs/design.md §6),
built vectorised, saved as a memory-mappable "gtmkit-trie" artifact. Node ids are BFS ids like the CSR trie's.

Layout (n nodes, m keys; see LoudsArrays for shapes): a 2n+1-bit LOUDS vector with rank9 and select
samples gives the children of node v as the id range [select0(v) - v, next zero); labels are a 16-bit
low part per node plus the high part (token >> 16) bit-packed in high_bits bits; terminal flags with a
rank directory turn a terminal node into its key id (terminals before it in BFS order)."""

from __future__ import annotations

import numpy as np

from ..errors import ArtifactError, GtmkitError
from ..artifact.container import ArtifactWriter, open_artifact
from ..artifact.npy import load as load_npy
from ..artifact.output import check_output
from ..artifact.trie_checks import trie_problems
from ..progress import Progress
from . import nav as nav
from .build import build_arrays
from ..artifact.trie_format import (ARRAY_NAMES, BASE_ARRAY_NAMES, FORMAT_NAME, FORMAT_VERSION, LABEL_DEFAULTS,
                                    SUPPORTED_VERSIONS, TAIL_ARRAY_NAMES, TAIL_FIELDS, write_trie)
from .tails import no_tails
from ..inputs.keys import MAX_TOKEN, clip_tokens, key_arrays



def _token(tok, what: str) -> int:
    if isinstance(tok, (bool, np.bool_)) or not isinstance(tok, (int, np.integer)):
        raise GtmkitError(f"{what}: tokens must be integers, got {type(tok).__name__} {tok!r}")
    return int(tok)


def _sequence(seq, what: str) -> np.ndarray:
    """A query sequence as int64 [L]; tokens outside [0, 2^31-1] are kept (they match nothing)."""
    if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__"):
        raise GtmkitError(f"{what}: expected a sequence of integer tokens, got {type(seq).__name__}")
    if isinstance(seq, np.ndarray):
        if seq.dtype.kind not in "iu" or seq.ndim != 1:
            raise GtmkitError(f"{what}: expected a 1-D integer array, got {seq.ndim}-D {seq.dtype}")
        return clip_tokens(seq)
    return np.array([min(max(_token(x, what), -1), MAX_TOKEN + 1) for x in seq], np.int64)


class SuccinctTrie:
    """A static trie of integer-token keys (tokens in [0, 2^31-1], any lengths >= 1).

    Build with ``SuccinctTrie.build(keys)`` or open with ``SuccinctTrie.load(dir)``. Key ids are
    0 .. num_keys-1 in BFS order of the key's last node: shorter keys first, equal lengths
    lexicographically. ``arrays`` is the LoudsArrays NamedTuple the numba / CUDA kernels read."""

    def __init__(self, arrays: nav.LoudsArrays, num_keys: int, path=None):
        self.arrays = arrays
        self.num_keys = int(num_keys)
        self.num_nodes = int(arrays.level_offsets[-1])
        self.path = path
        self._artifact = None

    # ----------------------------------------------------------------------------------- build / io

    @classmethod
    def build(cls, keys, progress: Progress = None, tails: bool = True) -> "SuccinctTrie":
        """Build from a list of integer sequences, a pyarrow list array of integers (chunked or not), a
        2-D integer numpy array or a ``(tokens, offsets)`` tuple of numpy arrays. Keys are sorted and
        deduplicated here. GtmkitError for no keys, an empty key, a null, a non-integer or negative
        token, or a token above 2^31-1 (the message names the key). tails: move the labels of single-child chains
        to the tail store where that takes fewer bytes (trie/tails.py); False keeps them all in label_low."""
        tokens, offsets = key_arrays(keys)
        return cls.from_built(build_arrays(tokens, offsets, progress, tails=bool(tails)))

    @classmethod
    def from_built(cls, built: dict) -> "SuccinctTrie":
        """A trie of build_arrays' (or levels_arrays') output."""
        return cls(_louds(built["arrays"], built), built["num_keys"])

    @classmethod
    def build_dataset(cls, keys, out_dir, column: str = "key", shards: int = None, client=None,
                      workers: int = None, memory_limit: int = None, progress: Progress = None,
                      overwrite: bool = False, no_worker_timeout: float = None, staging=None) -> "SuccinctTrie":
        """Build the trie of a Parquet key column (a file, a folder of files or a glob; a local path or a URL such
        as s3://bucket/keys/, inputs/stores.py) in shards and save it at out_dir; the arrays are build()'s over all
        the keys. shards / client / workers / memory_limit as
        gtmkit.build_index takes them: tasks here one after another, on a dask.distributed Client, or on a
        LocalCluster of `workers` processes; no_worker_timeout: seconds a build on Dask waits while the cluster
        has no live worker (default 300); staging: where tasks keep their pieces (gtmkit.build_index's). Returns the
        saved trie, loaded."""
        from ..sharding.runner import count_arg, runner
        from .shards import build_sharded_trie
        shards = None if shards is None else count_arg(shards, "shards", 1)
        workers = None if workers is None else count_arg(workers, "workers", 1)
        memory_limit = None if memory_limit is None else count_arg(memory_limit, "memory_limit", 1 << 20)
        check_output(out_dir, overwrite)
        run = runner(client, workers, memory_limit, no_worker_timeout, staging)
        try:
            build_sharded_trie(keys, out_dir, column, shards, run, memory_limit, progress, overwrite)
        finally:
            run.close()
        return cls.load(out_dir, verify=False)

    def save(self, path, overwrite: bool = False) -> None:
        """Write the "gtmkit-trie" v1 artifact (a new version of path, docs/format.md): one .npy per array
        + manifest.json with checksums. overwrite=True replaces only a gtmkit artifact."""
        with ArtifactWriter(path, FORMAT_NAME, FORMAT_VERSION, overwrite=overwrite) as w:
            self.write(w)
        self.path = path

    def write(self, w: ArtifactWriter) -> None:
        """The arrays and manifest into an open writer, committed."""
        a = nav.all_fields(self.arrays)
        write_trie(w, {"arrays": a, "num_nodes": self.num_nodes, "num_keys": self.num_keys,
                       "high_bits": self.arrays.high_bits, "low_bits": a["low_bits"], **{f: a[f] for f in TAIL_FIELDS}})
        self.path = w.out_dir

    @classmethod
    def load(cls, path, verify: bool = True, mmap: bool = True, cache=None) -> "SuccinctTrie":
        """Open a saved trie (arrays memory-mapped unless mmap=False). ArtifactError (one line) if the
        directory is not a sound gtmkit-trie artifact. verify=True (any trie): checksums and every invariant
        the trie search relies on (gtmkit/artifact/trie_checks.py). verify=False is for artifacts you
        produced: the manifest digest and the arrays' dtypes and shapes against the manifest only. An object-store
        URL is read through the local folder `cache` as load_index reads one (docs/format.md)."""
        art = open_artifact(path, FORMAT_NAME, SUPPORTED_VERSIONS, verify=verify, mmap=mmap, cache=cache)
        try:
            arrays, man = _member_arrays(path, art, mmap)
            for problem in trie_problems(path, man, arrays, full=verify):
                raise ArtifactError(problem)
        except BaseException:
            art.close()
            raise
        trie = cls(_louds(arrays, man), man["num_keys"], path=path)
        trie._artifact = art
        return trie

    def close(self) -> None:
        """Release the artifact version a loaded trie reads (idempotent; also ``with`` exit and garbage
        collection); a rebuild of its path deletes it at its next write."""
        if self._artifact is not None:
            self._artifact.close()

    def __enter__(self) -> "SuccinctTrie":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------------------------------- queries

    @property
    def max_depth(self) -> int:
        return len(self.arrays.level_offsets) - 2

    @property
    def nbytes(self) -> int:
        """Bytes of all arrays (what the index occupies in memory and, plus headers, on disk)."""
        return int(sum(getattr(self.arrays, name).nbytes for name in ARRAY_NAMES))

    def __len__(self) -> int:
        return self.num_keys

    def __contains__(self, seq) -> bool:
        return self.lookup(seq) >= 0

    def _node(self, node) -> int:
        v = _token(node, "node")
        if not 0 <= v < self.num_nodes:
            raise GtmkitError(f"node {v} out of range [0, {self.num_nodes})")
        return v

    def lookup(self, seq) -> int:
        """Key id of seq, or -1 if seq is not a key (tokens outside [0, 2^31-1] are never in a key)."""
        toks = _sequence(seq, "lookup")
        if len(toks) == 0:
            return -1
        return int(nav.lookup_many(self.arrays, toks, np.array([0, len(toks)], np.int64))[0])

    def lookup_many(self, keys) -> np.ndarray:
        """int64 [m]: key id of each query key (same input forms as build), -1 where absent."""
        tokens, offsets = key_arrays(keys, check=False)
        return nav.lookup_many(self.arrays, tokens, offsets)

    def find_child(self, node, token) -> int:
        """Child of node along token, or -1 (binary search over the node's sorted labels)."""
        v, tok = self._node(node), _token(token, "find_child")
        if not 0 <= tok <= MAX_TOKEN:
            return -1
        return int(nav.find_child(self.arrays, v, tok))

    def child_range(self, node) -> tuple:
        """(first, end): the children of node are the node ids first .. end-1 (BFS numbering)."""
        first, end = nav.child_range(self.arrays, self._node(node))
        return int(first), int(end)

    def children(self, node) -> tuple:
        """(labels int64 [deg] ascending, child node ids int64 [deg]) of node."""
        first, end = nav.child_range(self.arrays, self._node(node))
        return nav.labels_between(self.arrays, first, end), np.arange(first, end, dtype=np.int64)

    def node_of(self, seq) -> int:
        """Node reached from the root along seq (the root for an empty seq), or -1."""
        toks = _sequence(seq, "node_of")
        return int(nav.walk(self.arrays, toks, 0, len(toks)))

    def is_terminal(self, node) -> bool:
        return bool(nav.is_terminal(self.arrays, self._node(node)))

    def key(self, key_id) -> tuple:
        """The tokens of key key_id, as a tuple of ints."""
        k = _token(key_id, "key")
        if not 0 <= k < self.num_keys:
            raise GtmkitError(f"key id {k} out of range [0, {self.num_keys})")
        out = np.empty(max(self.max_depth, 1), np.int64)
        d = nav.key_tokens(self.arrays, k, out)
        return tuple(int(x) for x in out[:d])

    def keys_with_prefix(self, prefix=(), limit=None) -> np.ndarray:
        """int64 [<= limit]: ids of the keys starting with prefix (prefix itself included), ascending
        (shorter keys first, equal lengths lexicographically); restore tokens with key(id)."""
        v = self.node_of(prefix)
        lim = self.num_keys if limit is None else _token(limit, "limit")
        if v < 0 or lim <= 0:
            return np.zeros(0, np.int64)
        return nav.subtree_keys(self.arrays, v, lim)

    def nodes_per_depth(self) -> np.ndarray:
        return np.diff(self.arrays.level_offsets)

    def stats(self) -> dict:
        """Counts and bytes per array and per structure (JSON-ready)."""
        arr = {name: int(getattr(self.arrays, name).nbytes) for name in ARRAY_NAMES}
        groups = {"louds": ("louds", "louds_rank", "louds_select0", "louds_select1"),
                  "terminal": ("terminal", "terminal_rank", "terminal_select1"),
                  "head_labels": ("label_low", "label_high"), "tails": TAIL_ARRAY_NAMES,
                  "levels": ("level_offsets", "level_label")}
        a = self.arrays
        return {"keys": self.num_keys, "nodes": self.num_nodes, "max_depth": self.max_depth,
                "high_bits": int(a.high_bits), "low_bits": int(a.low_bits), "tail_nodes": int(a.tail_nodes),
                "const_levels": int(len(a.level_label)), "const_nodes": int(self.num_nodes - a.const_from),
                "link_nodes": self._link_nodes(), "tail_dict": int(len(a.tail_dict)),
                "tail_code_bits": [int(a.tail_low_bits), int(a.tail_high_bits)],
                "tail_bytes": sum(arr[x] for x in TAIL_ARRAY_NAMES),
                "structure_bytes": {g: sum(arr[x] for x in names) for g, names in groups.items()},
                "nodes_per_depth": self.nodes_per_depth().tolist(),
                "bytes": self.nbytes, "bits_per_node": round(8 * self.nbytes / self.num_nodes, 3),
                "bytes_per_key": round(self.nbytes / max(self.num_keys, 1), 3), "array_bytes": arr}

    def _link_nodes(self) -> int:
        """Nodes whose only child is a tail node: the heads of the chains whose labels sit in the tail store."""
        return int(nav.link_nodes(self.arrays)) if self.arrays.tail_nodes else 0

    def __repr__(self) -> str:
        return f"SuccinctTrie(keys={self.num_keys}, nodes={self.num_nodes}, bytes={self.nbytes})"


def _array(art, name: str, mmap: bool) -> np.ndarray:
    """A member array; memory-mapped copy-on-write, so numba sees the same (writable) array type as a
    freshly built trie's and needs no second compilation of every kernel for read-only arrays."""
    if not mmap:
        return art.array(name)
    fpath = art.dir / art.manifest["files"][name]["file"]
    try:
        return np.asarray(load_npy(fpath, "c"))
    except Exception as exc:
        raise ArtifactError(f"{fpath}: cannot load array ({type(exc).__name__})") from None


def _louds(arrays: dict, fields: dict):
    """LoudsArrays of the arrays and the build's (or manifest's) counts."""
    lo = arrays["level_offsets"]
    return nav.louds_arrays(high_bits=int(fields["high_bits"]), low_bits=int(fields.get("low_bits", 16)),
                           const_from=int(lo[len(lo) - 1 - len(arrays["level_label"])]),
                           **{f: int(fields.get(f, 0)) for f in TAIL_FIELDS}, **arrays)


def _member_arrays(path, art, mmap: bool) -> tuple:
    """(arrays by name, manifest): a version 1 or 2 trie (no tail arrays) reads as one with tails off, a trie
    without level_label (versions 1, 2 and early 3) as one with 16-bit labels and no constant levels."""
    man = dict(art.manifest)
    version = int(man.get("format_version", 0))
    names = tuple(x for x in ARRAY_NAMES if x != "level_label") if version >= 3 else BASE_ARRAY_NAMES
    missing = [name for name in names if name not in art.names]
    if missing:
        raise ArtifactError(f"{path}: missing arrays {missing}")
    arrays = {name: _array(art, name, mmap) for name in names}
    if version < 3:
        n = int(man.get("num_nodes", 2)) if isinstance(man.get("num_nodes"), int) else 2
        arrays.update(no_tails(max(n, 2))["arrays"])
        man.update({f: 0 for f in TAIL_FIELDS}, tail_dict_size=0)
    if "level_label" in art.names:
        arrays["level_label"] = _array(art, "level_label", mmap)
    else:
        man.update(LABEL_DEFAULTS)
        arrays["level_label"] = np.zeros(0, np.int32)
    return arrays, man


def verify_trie(path, cache=None) -> list:
    """Every problem SuccinctTrie.load(verify=True) would refuse the trie at path for, one line each (the manifest
    digest and checksums first: a trie whose files fail them is not checked further); [] for a sound trie."""
    try:
        art = open_artifact(path, FORMAT_NAME, SUPPORTED_VERSIONS, verify=True, mmap=True, cache=cache)
    except ArtifactError as exc:
        return [str(exc)]
    try:
        arrays, man = _member_arrays(path, art, True)
        return list(trie_problems(path, man, arrays, full=True))
    except ArtifactError as exc:
        return [str(exc)]
    finally:
        art.close()
