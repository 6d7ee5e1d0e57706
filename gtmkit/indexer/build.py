"""Offline build: Parquet catalog -> GTM index artifact (docs/design.md §3), phase by phase with timings."""

from __future__ import annotations

import logging

import numpy as np

from .._arrays import offsets_from_lengths
from ..errors import GtmkitError
from ..artifact import index_format as fmt
from ..artifact.container import ArtifactWriter
from ..inputs.catalog import open_catalog, read_catalog
from ..artifact.output import check_output
from ..inputs.schema import PartitionSpec, Schema, make_partition, resolve_schema
from ..progress import Progress, report
from ..targeting.semantics import wide_attributes, wide_note
from .adindex import reorder_lists, sid_ad_map
from .budget import build_bytes, check_fits, least_row_words
from .dedup import RowDeduper, add_columns
from .levels import level_k, level_parts
from .partition import level_partitions
from .rows import ad_rows, resolve_layout
from .stats import level_table_stats
from .trie import build_trie
from .write import Timer, write_index

log = logging.getLogger(__name__)


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


def build_index(catalog, out_dir, schema=None, partition=None, k=None, target_fill=None, k_max=None,
                progress: Progress = None, overwrite: bool = False, shards: int = None, client=None,
                workers: int = None, memory_limit: int = None, slack: float = None, no_worker_timeout: float = None,
                staging=None):
    """Build the GTM index of a Parquet catalog into directory `out_dir` and return it loaded. catalog: a file, a
    folder of files (hive ones too) or a glob, a local path or a URL (s3://, gs://, hdfs://, file://; the store
    configured by its usual environment, for S3 the AWS_* variables with AWS_ENDPOINT_URL).

    schema: Schema, dict, JSON path or URL, or None for `<stem>.schema.json` beside the catalog.
    partition: "none" | "static" (k: one int per SID level, or one int) | "dynamic" (target_fill, k_max);
    None keeps the schema's setting. Any argument given overrides the schema's.
    progress: optional callable (done, total, phase). overwrite=True replaces only a gtmkit artifact (any
    other file or folder at out_dir is refused). On error out_dir serves what it served before. slack: the new ads
    `gtmkit update` may add before a rebuild, as a share of the catalog's ads (default: 1%, at least 1000).

    Sharded (any of these given; the arrays are the same as without): shards: how many first-token ranges are
    built apart (default: enough that one fits memory_limit bytes, at least one a worker); client: a
    dask.distributed Client whose workers build them; workers: a LocalCluster of that many processes instead;
    neither: the shards are built here one after another. memory_limit: bytes a worker may hold.
    no_worker_timeout: seconds the build waits while the cluster has no live worker before it fails (default
    300); a lost scheduler, a worker that cannot start or a task that kills every worker running it fail at once.
    staging: a local path or URL (s3://...) that the driver and every worker reach, where tasks keep their pieces
    between phases instead of returning them through Dask (for catalogs larger than the cluster's memory)."""
    from ..index import load_index

    timer = Timer()
    schema = resolve_schema(catalog, schema)
    spec = choose_partition(schema, partition, k, target_fill, k_max)
    schema = schema.with_partition(spec)
    slack = _slack_arg(slack)
    out_dir = check_output(out_dir, overwrite)  # refused before the catalog is read, not after the build
    if shards is not None or client is not None or workers is not None or staging is not None:
        return _build_sharded(catalog, out_dir, schema, spec, shards, client, workers, memory_limit, progress,
                              overwrite, timer, slack, no_worker_timeout, staging)

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
                    level_stats, ad_level, ads, ad_lists, timer, progress, slack=slack)
    return _noted(load_index(out_dir, verify=False))


def _noted(index):
    """The built index, its wide bitmask attributes logged (`gtmkit build` says so on stderr)."""
    wide = wide_attributes(index.layout)
    if wide:
        log.warning("%s: %s", index.path, wide_note(wide))
    return index


def _slack_arg(slack):
    if slack is None:
        return None
    if isinstance(slack, bool) or not isinstance(slack, (int, float)) or not 0 <= slack <= 10:
        raise GtmkitError(f"slack must be a share of the catalog's ads in [0, 10], got {slack!r}")
    return float(slack)


def _build_sharded(catalog, out_dir, schema, spec, shards, client, workers, memory_limit, progress, overwrite,
                   timer, slack, no_worker_timeout=None, staging=None):
    from ..index import load_index
    from .shards.run import build_sharded
    from ..sharding.runner import count_arg, runner
    shards = None if shards is None else count_arg(shards, "shards", 1)
    workers = None if workers is None else count_arg(workers, "workers", 1)
    memory_limit = None if memory_limit is None else count_arg(memory_limit, "memory_limit", 1 << 20)
    source = open_catalog(catalog, schema)  # every file's columns checked before a cluster starts
    run = runner(client, workers, memory_limit, no_worker_timeout, staging)
    try:
        build_sharded(catalog, out_dir, schema, spec, shards, run, memory_limit, progress, overwrite, timer, slack,
                      source)
    finally:
        run.close()
    return _noted(load_index(out_dir, verify=False))


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
        widths = [level_k(spec, d) for d in range(L + 1)]
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
