"""Offline build: Parquet catalog -> GTM index artifact (docs/design.md §3), phase by phase with timings."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from .._arrays import offsets_from_lengths
from ..formats import index_format as fmt
from ..formats.artifact import ArtifactWriter
from ..formats.catalog import read_catalog
from ..formats.output import check_output
from ..errors import GtmkitError
from ..formats.schema import PartitionSpec, Schema, make_partition, resolve_schema
from ..progress import Progress, report
from .adindex import reorder_lists, sid_ad_map
from .budget import build_bytes, check_fits, least_row_words
from .dedup import RowDeduper, add_columns
from .partition import level_partitions
from .rows import ad_rows, resolve_layout
from .stats import level_table_stats, summarize
from .trie import build_trie


class _Timer:
    def __init__(self):
        self.seconds = {}
        self._t0 = time.perf_counter()
        self._last = self._t0

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._last
        self._last = now

    def total(self) -> float:
        return time.perf_counter() - self._t0


def choose_partition(schema: Schema, partition, k, target_fill, k_max) -> PartitionSpec:
    """Explicit arguments win; the schema's setting fills only what they leave out of the same mode."""
    base = schema.partition
    if partition is None and k is None and target_fill is None and k_max is None:
        return base
    mode = partition or base.mode
    if mode == base.mode and mode != "none":  # e.g. --k-max alone keeps the schema's target_fill
        k = base.k if k is None and mode == "static" else k
        target_fill = base.target_fill if target_fill is None and mode == "dynamic" else target_fill
        k_max = base.k_max if k_max is None and mode == "dynamic" else k_max
    return make_partition(mode, k, target_fill, k_max, schema.sid_length, "partition")


def _level_k(spec: PartitionSpec, depth: int) -> int:
    if depth == 0 or spec.mode == "none":
        return 1
    if spec.mode == "static":
        return spec.k[depth - 1]
    return spec.k_max


def level_parts(spec: PartitionSpec, d: int, trie, rows, sid_rows, sid_ad_offsets, rl) -> tuple:
    """(partitions a node, their union rows) of the trie's depth-d nodes: members are the SIDs' union rows
    below a node, a leaf's own ads at depth L (where k = 1 keeps the SID's union row itself)."""
    L, S = trie.unique_sids.shape[1], len(trie.unique_sids)
    if d == L and _level_k(spec, d) == 1 and spec.mode != "dynamic":
        return np.ones(S, np.int64), sid_rows
    if d == L:
        return node_partitions(spec, d, rows, sid_ad_offsets[:-1], sid_ad_offsets[1:], rl)
    return node_partitions(spec, d, sid_rows, *trie.sid_ranges(d), rl)


def node_partitions(spec: PartitionSpec, d: int, M, lo, hi, rl) -> tuple:
    """level_partitions of depth-d nodes whose members are M[lo[i]:hi[i]], with the spec's k of that depth."""
    kd, dyn = _level_k(spec, d), spec.mode == "dynamic" and d > 0
    return level_partitions(M, lo, hi, kd, dyn, spec.target_fill or 1.0, spec.k_max or 1, rl.n_bits)


def build_index(catalog, out_dir, schema=None, partition=None, k=None, target_fill=None, k_max=None,
                progress: Progress = None, overwrite: bool = False, shards: int = None, client=None,
                workers: int = None, memory_limit: int = None):
    """Build the GTM index of a Parquet catalog into directory `out_dir` and return it loaded.

    schema: Schema, dict, JSON path, or None for `<stem>.schema.json` beside the catalog.
    partition: "none" | "static" (k: one int per SID level, or one int) | "dynamic" (target_fill, k_max);
    None keeps the schema's setting. Any argument given overrides the schema's.
    progress: optional callable (done, total, phase). overwrite=True replaces only a gtmkit artifact (any
    other file or folder at out_dir is refused). On error out_dir serves what it served before.

    Sharded (any of these given; the arrays are the same as without): shards: how many first-token ranges are
    built apart (default: enough that one fits memory_limit bytes, at least one a worker); client: a
    dask.distributed Client whose workers build them; workers: a LocalCluster of that many processes instead;
    neither: the shards are built here one after another. memory_limit: bytes a worker may hold."""
    from ..index import load_index

    timer = _Timer()
    schema = resolve_schema(catalog, schema)
    spec = choose_partition(schema, partition, k, target_fill, k_max)
    schema = schema.with_partition(spec)
    out_dir = check_output(out_dir, overwrite)  # refused before the catalog is read, not after the build
    if shards is not None or client is not None or workers is not None:
        return _build_sharded(catalog, out_dir, schema, spec, shards, client, workers, memory_limit, progress,
                              overwrite, timer)

    cat = read_catalog(catalog, schema, progress, check_rows=lambda n: check_fits(
        build_bytes(n, schema.sid_length, least_row_words(schema)), f"{catalog}: building an index of {n} ads"))
    timer.lap("read")

    L, V = schema.sid_length, schema.vocab
    trie = build_trie(cat.sids, V)
    S, N = len(trie.unique_sids), cat.num_ads
    order, sid_ad_offsets, sid_ad_ids, ad_ids_sorted, ad_rows_by_id = sid_ad_map(trie.ad_sid, cat.ad_ids, S)
    del trie.ad_sid  # the largest build-only array; `order` replaces it
    report(progress, 1, 1, "trie")
    timer.lap("trie")

    layout, code_bits, rl = resolve_layout(cat, schema)
    check_fits(build_bytes(N, L, rl.width), f"{catalog}: {N} ads with {rl.width * 64} targeting bits each")
    rows = ad_rows(cat, schema, layout, code_bits, rl, order)
    slices = rl.slices()
    # Bitmask lists and SIDs live on in `rows` and the trie: free them before the matcher phase peaks.
    cat.sids = None
    for j in range(len(schema.bitmask)):
        cat.allowed[j] = cat.excluded[j] = None
    report(progress, 1, 1, "rows")
    timer.lap("rows")

    dedupers = [RowDeduper(s.stop - s.start) for s in slices]
    ad_bitmask_ids = dedupers[0].add(rows[:, slices[0]])
    ad_level = level_table_stats(rows, np.ones(N, np.int64), [ad_bitmask_ids], slices[:1], rl)
    timer.lap("dedup")

    # Per-SID unions are the members of every internal node's partitioning.
    lo_ads, hi_ads = sid_ad_offsets[:-1], sid_ad_offsets[1:]
    _, sid_rows = level_partitions(rows, lo_ads, hi_ads)
    timer.lap("partitions")

    level_counts, level_ids, level_stats = [], [], []
    for d in range(L + 1):
        counts, parts = level_parts(spec, d, trie, rows, sid_rows, sid_ad_offsets, rl)
        timer.lap("partitions")
        ids = add_columns(dedupers, parts, slices)
        timer.lap("dedup")
        if d > 0:
            level_stats.append(level_table_stats(parts, counts, ids, slices, rl))
        level_counts.append(counts)
        level_ids.append(ids)
        del parts
        report(progress, d + 1, L + 1, "matchers")
    del rows, sid_rows
    timer.lap("partitions")

    tables = [dd.table() for dd in dedupers]
    del dedupers
    timer.lap("dedup")

    nbm = len(schema.bitmask)
    ad_lists = []
    for b in range(len(schema.bloom)):
        al, ex = cat.allowed[nbm + b], cat.excluded[nbm + b]
        ad_lists.append((reorder_lists(al.offsets, al.codes, order), reorder_lists(ex.offsets, ex.codes, order),
                         al.dictionary))
    report(progress, 1, 1, "ad index")
    timer.lap("ad index")

    ads = {"sid_ad_offsets": sid_ad_offsets, "sid_ad_ids": sid_ad_ids, "ad_bitmask_ids": ad_bitmask_ids,
           "ad_ids_sorted": ad_ids_sorted, "ad_rows_by_id": ad_rows_by_id}
    with ArtifactWriter(out_dir, fmt.FORMAT_NAME, fmt.FORMAT_VERSION, overwrite=overwrite) as w:
        write_index(w, catalog, schema, layout, rl, trie, _matcher_columns(spec, level_counts, level_ids, L), tables,
                    level_stats, ad_level, ads, ad_lists, timer, progress)
    return load_index(out_dir, verify=False)


def _count(x, name: str, lo: int) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < lo:
        raise GtmkitError(f"{name} must be an integer >= {lo}, got {x!r}")
    return int(x)


def _build_sharded(catalog, out_dir, schema, spec, shards, client, workers, memory_limit, progress, overwrite,
                   timer):
    from ..index import load_index
    from .shards.run import build_sharded, runner
    shards = None if shards is None else _count(shards, "shards", 1)
    workers = None if workers is None else _count(workers, "workers", 1)
    memory_limit = None if memory_limit is None else _count(memory_limit, "memory_limit", 1 << 20)
    run = runner(client, workers, memory_limit)
    try:
        build_sharded(catalog, out_dir, schema, spec, shards, run, memory_limit, progress, overwrite, timer)
    finally:
        run.close()
    return load_index(out_dir, verify=False)


def write_index(w, catalog, schema, layout, rl, trie, matchers: tuple, tables, level_stats, ad_level, ads: dict,
                ad_lists: list, timer: _Timer, progress: Progress = None, build: dict = None) -> None:
    """The index's arrays, statistics and manifest into the open writer w, committed: shared by the
    single-process and the sharded build, which differ only in how they reach these pieces. trie: level_offsets,
    node_offsets, child_tokens, max_degree, num_sids, num_nodes; matchers: (the nodes' partition id arrays, their
    layout); ads: the SID->ad map and ad-id lookup; ad_lists: per Bloom attribute ((allow offsets, codes),
    (exclude offsets, codes), dictionary); build: how it was built. Arrays the writer already holds (streamed
    into it) are not written again."""
    L = schema.sid_length
    part_arrays, part_layout = matchers
    arrays = {
        "level_offsets": trie.level_offsets, "node_offsets": trie.node_offsets,
        "child_tokens": trie.child_tokens, "max_degree": trie.max_degree,
        **part_arrays,
        "bitmask_table": tables[0],
        **{k: ads[k] for k in ("sid_ad_offsets", "sid_ad_ids", "ad_bitmask_ids")},
        **{k: ads[k] for k in ("ad_ids_sorted", "ad_rows_by_id")},
    }
    for b, ((a_off, a_codes), (e_off, e_codes), _) in enumerate(ad_lists):
        arrays[fmt.bloom_table(b)] = tables[1 + b]
        arrays.update(zip(fmt.ad_allow(b), (a_off, a_codes)))
        arrays.update(zip(fmt.ad_exclude(b), (e_off, e_codes)))

    counts = {"sids": trie.num_sids, "ads": len(ads["sid_ad_ids"]), "nodes": trie.num_nodes,
              "internal_nodes": int(trie.level_offsets[L]), "sid_length": L, "vocab": schema.vocab}
    stats = summarize(trie, ads["sid_ad_offsets"], schema, layout, rl, tables, level_stats, ad_level, arrays,
                      part_layout)
    manifest = {
        "schema": schema.to_dict(),
        "source": {"catalog": str(Path(catalog).resolve())},
        "bitmask_layout": layout.to_dict(),
        "bloom": [{"name": a.name, "bits": a.bits, "hashes": a.hashes, "seed": a.seed, "words": a.words}
                  for a in schema.bloom],
        "counts": counts,
        "partition_layout": part_layout,
        "stats": stats,
        "build": build or {"mode": "single-process"},
    }
    for i, (name, arr) in enumerate(arrays.items()):
        if not w.has(name):
            w.add_array(name, arr)
        report(progress, i + 1, len(arrays), "write")
    for b, (_, _, dictionary) in enumerate(ad_lists):
        w.add_table(fmt.bloom_dict(b), pa.table({"value": pa.array(dictionary, pa.string())}))
    timer.lap("write")
    stats["build_seconds"] = {**{k: round(v, 4) for k, v in timer.seconds.items()}, "total": round(timer.total(), 4)}
    if build:
        stats["shards"] = build["shards"]
    w.commit(manifest)


def _matcher_columns(spec: PartitionSpec, level_counts, level_ids, L) -> tuple:
    """Per-node partition ids: fixed width per level (none/static) or jagged CSR (dynamic).

    Fixed: node n of depth d owns ids [base_d + (n - level_offsets[d]) * w_d, ... + w_d), -1 padded.
    Jagged: node n owns ids [part_offsets[n], part_offsets[n+1])."""
    n_tables = len(level_ids[0])
    if spec.mode == "dynamic":
        counts = np.concatenate(level_counts)
        part_offsets = offsets_from_lengths(counts)
        ids = [np.concatenate([lv[t] for lv in level_ids]) for t in range(n_tables)]
        arrays = {"part_offsets": part_offsets}
        layout = {"kind": "jagged"}
    else:
        widths = [_level_k(spec, d) for d in range(L + 1)]
        bases = np.zeros(L + 2, np.int64)
        np.cumsum([len(level_counts[d]) * widths[d] for d in range(L + 1)], out=bases[1:])
        ids = [np.full(int(bases[-1]), -1, np.int32) for _ in range(n_tables)]
        for d in range(L + 1):
            c = level_counts[d]
            off = offsets_from_lengths(c)
            node = np.repeat(np.arange(len(c)), c)
            pos = bases[d] + node * widths[d] + (np.arange(int(off[-1])) - off[:-1][node])
            for t in range(n_tables):
                ids[t][pos] = level_ids[d][t]
        arrays = {}
        layout = {"kind": "fixed", "level_width": widths, "level_base": bases.tolist()}
    arrays["part_bitmask_ids"] = ids[0].astype(np.int32)
    if n_tables > 1:
        arrays["part_bloom_ids"] = np.ascontiguousarray(np.stack([i.astype(np.int32) for i in ids[1:]], axis=1))
    return arrays, layout
