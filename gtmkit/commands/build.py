"""`gtmkit build`: Parquet catalog -> GTM index directory."""

from __future__ import annotations

import contextlib
import re

import click

from ..errors import GtmkitError

from ._common import StderrProgress, echo_json, handle_errors
from .stats import print_summary


def parse_k(ctx, param, value):
    if value is None:
        return None
    try:
        ks = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter("expected comma-separated integers, e.g. 1,4,4,2") from None
    return ks[0] if len(ks) == 1 else ks


UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
         "tib": 2**40}


def parse_bytes(ctx, param, value):
    """'8GiB', '500MB', '1e9' -> bytes."""
    if value is None:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", value)
    if not m or m.group(2).lower() not in UNITS or float(m.group(1)) * UNITS[m.group(2).lower()] < 1:
        raise click.BadParameter(f"{value!r}: expected a size such as 4GiB, 500MB or 1000000000")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


@contextlib.contextmanager
def dask_client(address):
    """A Client of the Dask cluster at address (None: no cluster)."""
    if not address:
        yield None
        return
    try:
        from distributed import Client
    except ImportError:
        raise GtmkitError("--scheduler needs dask and distributed: pip install 'gtmkit[dist]'") from None
    try:
        client = Client(address, timeout=10)
    except (OSError, TimeoutError) as exc:
        raise GtmkitError(f"--scheduler {address}: cannot reach a Dask scheduler there ({exc})") from None
    try:
        yield client
    finally:
        client.close()


@click.command("build")
@click.argument("catalog", type=click.Path())  # checked by the build: one line, exit 1
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(), help="Index directory to write (new, empty, or a gtmkit index with --force).")
@click.option("--schema", type=click.Path(), help="Schema JSON [default: <stem>.schema.json beside CATALOG].")
@click.option("--partition", type=click.Choice(["none", "static", "dynamic"]), default=None,
              help="k-way matcher partitioning [default: the schema's, else none].")
@click.option("--k", "k", callback=parse_k, help="Static: partitions per SID level, e.g. 1,4,4,2 (or one value).")
@click.option("--target-fill", type=float, help="Dynamic: grow k until the mean fill rate is <= this.")
@click.option("--k-max", type=int, help="Dynamic: most partitions per node.")
@click.option("--shards", type=click.IntRange(min=1), help="Build in this many first-token shards (the same index; "
              "default with --workers or --scheduler: enough that one fits --memory-limit).")
@click.option("--workers", type=click.IntRange(min=1), help="Build the shards on a local Dask cluster of this many "
              "worker processes (extra dist).")
@click.option("--scheduler", help="Build the shards on the Dask cluster at this address, e.g. tcp://host:8786 "
              "(its workers must see CATALOG and the output path).")
@click.option("--memory-limit", callback=parse_bytes, help="Memory a worker may hold, e.g. 4GiB "
              "[default: this machine's memory over the workers].")
@click.option("-f", "--force", is_flag=True, help="Replace an existing index directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
@click.option("-s", "--silent", is_flag=True, help="No progress bar or first-compile notice on stderr.")
@handle_errors
def command(catalog, out_dir, schema, partition, k, target_fill, k_max, shards, workers, scheduler, memory_limit,
            force, as_json, silent):
    """Build the GTM index of an ad catalog: a Parquet file, a directory of Parquet files (hive partitions
    too) or a quoted glob; rows are read in file path order.

    \b
    Example:
        gtmkit synth catalog --ads 100000 -o catalog.parquet
        gtmkit build catalog.parquet -o index/ --partition static --k 1,4,4,2
        gtmkit build catalog/ -o index/ --schema catalog.schema.json
        gtmkit build 'exports/part-*.parquet' -o index/ --schema catalog.schema.json
        gtmkit build catalog.parquet -o index/ --partition dynamic --target-fill 0.4 --k-max 8 -f
        gtmkit build catalog/ -o index/ --workers 2 --memory-limit 8GiB
    """
    from ..indexer.build import build_index

    if workers and scheduler:
        raise click.UsageError("--workers starts a local cluster, --scheduler uses one: give one of them")
    with StderrProgress(silent or as_json) as bar, dask_client(scheduler) as client:
        index = build_index(catalog, out_dir, schema=schema, partition=partition, k=k,
                            target_fill=target_fill, k_max=k_max, progress=bar, overwrite=force, shards=shards,
                            client=client, workers=workers, memory_limit=memory_limit)
    stats = index.stats()
    if as_json:
        echo_json(stats)
    else:
        print_summary(stats)
