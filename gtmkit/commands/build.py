"""`gtmkit build`: Parquet catalog -> GTM index directory."""

from __future__ import annotations

import click

from ._cluster import check_cluster, dask_client, inputs, sharding_options, warnings_shown
from ._common import StderrProgress, echo_json, handle_errors, output_options
from ._stops import watched
from .stats import print_summary


def parse_k(ctx, param, value):
    if value is None:
        return None
    try:
        ks = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter("expected comma-separated integers, e.g. 1,4,4,2") from None
    return ks[0] if len(ks) == 1 else ks


@click.command("build")
@click.argument("catalog", type=click.Path())  # checked by the build: one line, exit 1
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(), help="Index directory to write (new, empty, or a gtmkit index with --force).")
@click.option("--schema", type=click.Path(), help="Schema JSON, a path or URL [default: <stem>.schema.json beside CATALOG].")
@click.option("--partition", type=click.Choice(["none", "static", "dynamic"]), default=None,
              help="k-way matcher partitioning [default: the schema's, else none].")
@click.option("--k", "k", callback=parse_k, help="Static: partitions per SID level, e.g. 1,4,4,2 (or one value).")
@click.option("--target-fill", type=float, help="Dynamic: grow k until the mean fill rate is <= this.")
@click.option("--k-max", type=int, help="Dynamic: most partitions per node.")
@sharding_options("CATALOG", "first SID tokens")
@click.option("--slack", type=click.FloatRange(0, 10), default=None,
              help="New ads `gtmkit update` may add before a rebuild, as a share of the catalog's ads [default: 0.01, "
                   "at least 1000 ads].")
@click.option("-f", "--force", is_flag=True, help="Replace an existing index directory (the output names the version replaced).")
@output_options("the statistics")
@handle_errors
def command(catalog, out_dir, schema, partition, k, target_fill, k_max, shards, workers, scheduler, memory_limit,
            slack, force, as_json, silent, no_worker_timeout, staging):
    """Build the GTM index of an ad catalog: a Parquet file, a directory of Parquet files (hive partitions
    too) or a quoted glob, local or under a URL (s3://, gs://, hdfs://, file://; credentials and endpoint from
    the store's environment, e.g. AWS_* with AWS_ENDPOINT_URL); rows are read in file path order.

    \b
    Example:
        gtmkit synth catalog --ads 100000 -o catalog.parquet
        gtmkit build catalog.parquet -o index/ --partition static --k 1,4,4,2
        gtmkit build catalog/ -o index/ --schema catalog.schema.json
        gtmkit build 'exports/part-*.parquet' -o index/ --schema catalog.schema.json
        gtmkit build s3://bucket/catalog/ -o index/ --schema s3://bucket/catalog.schema.json
        gtmkit build catalog.parquet -o index/ --partition dynamic --target-fill 0.4 --k-max 8 -f
        gtmkit build catalog/ -o index/ --workers 2 --memory-limit 8GiB
        gtmkit build s3://bucket/catalog/ -o s3://bucket/index --scheduler tcp://host:8786
    """
    from ..indexer.build import build_index
    from ..targeting.semantics import wide_note

    check_cluster(workers, scheduler, no_worker_timeout, staging, shards)
    catalog, schema = inputs(catalog, schema)
    with StderrProgress(silent or as_json) as bar, dask_client(scheduler) as client, watched(out_dir) as sw, \
            warnings_shown(silent):
        index = build_index(catalog, out_dir, schema=schema, partition=partition, k=k,
                            target_fill=target_fill, k_max=k_max, progress=bar, overwrite=force, shards=shards,
                            client=client, workers=workers, memory_limit=memory_limit, slack=slack,
                            no_worker_timeout=no_worker_timeout, staging=staging)
    stats = index.stats()
    if stats.get("wide_bitmask") and not silent:
        click.echo(f"gtmkit: warning: {wide_note(stats['wide_bitmask'])}", err=True)
    if as_json:
        echo_json(dict(stats, **replaced_fields(sw)))
    else:
        print_summary(stats)
        echo_replaced(out_dir, sw)


def replaced_fields(sw) -> dict:
    """What a build's pointer switch replaced (None: nothing), and what the path served when the build started."""
    return {"replaced_version": sw.replaced, "version_at_start": sw.started}


def echo_replaced(out_dir, sw) -> None:
    """Say which version a build replaced, and that it is not the one served at the start where another writer
    published meanwhile (its work is gone from the path now, by this build's --force)."""
    if sw.replaced is None:
        return
    if sw.replaced == sw.started:
        click.echo(f"{out_dir}: replaced version {sw.replaced}")
        return
    click.echo(f"{out_dir}: replaced version {sw.replaced}, which another writer published while this build ran "
               f"(the path served {sw.started or 'no version'} when it started)")
