"""Options the sharded builds share: sizes such as 8GiB, and a Dask cluster named by its scheduler's address."""

from __future__ import annotations

import contextlib
import logging
import os
import re

import click

from ..errors import GtmkitError

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
    """A Client of the Dask cluster at address (None: no cluster), its address checked by a bounded handshake;
    distributed's own log lines silenced meanwhile, as a task's error or a lost cluster is the command's one line."""
    if not address:
        yield None
        return
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise GtmkitError("--scheduler needs dask and distributed: pip install 'gtmkit[dist]'") from None
    from ..sharding.cluster import connect
    with _quiet("distributed"):
        client = connect(address, label=f"--scheduler {address}")
        try:
            yield client
        finally:
            client.close()


@contextlib.contextmanager
def warnings_shown(silent: bool):
    """The library's warnings (logging, "gtmkit.sharding"), such as a shard count that cannot leave room for the
    pieces, as `gtmkit: warning: ...` lines on stderr meanwhile; none with silent."""
    if silent:
        yield
        return
    handler = _Echo(logging.WARNING)
    logger = logging.getLogger("gtmkit.sharding")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


class _Echo(logging.Handler):
    def emit(self, record) -> None:
        click.echo(f"gtmkit: warning: {record.getMessage()}", err=True)


@contextlib.contextmanager
def _quiet(root: str):
    """The loggers root and root.* silenced meanwhile (distributed sets levels on its children too)."""
    names = [root] + [n for n in logging.root.manager.loggerDict if n.startswith(root + ".")]
    levels = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)


def no_worker_option(what: str):
    return click.option("--no-worker-timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
                        help=f"With --workers or --scheduler: fail when the cluster has had no live worker for this "
                        f"many seconds (none joined, or all died) [default: 300]; a lost scheduler, a worker that "
                        f"cannot start or a task that kills every worker running it fails {what} at once.")


def staging_option():
    return click.option("--staging", metavar="URL", help="Keep the pieces between phases in files under this "
                        "local path or URL (s3://...; this process and every worker must reach it) instead of in "
                        "the workers' memory. Use it when the output is too large for the cluster's memory (the "
                        "pieces are about the output's size, more than the workers' memory limits together) and "
                        "their local disks too small to spill it; else leave it out (the pieces then need no store "
                        "every worker reaches). A folder of the run is made there and removed at its end.")


def sharding_options(what: str, unit: str):
    """The options of a build that may run in shards: what, the input's argument name; unit, what a shard is."""
    def add(f):
        for option in reversed([
            click.option("--shards", type=click.IntRange(min=1), help=f"Build in this many shards of {unit} (the "
                         "same result; default with --workers or --scheduler: enough that one fits --memory-limit)."),
            click.option("--workers", type=click.IntRange(min=1), help="Build the shards on a local Dask cluster "
                         "of this many worker processes (extra dist)."),
            click.option("--scheduler", help=f"Build the shards on the Dask cluster at this address, e.g. "
                         f"tcp://host:8786 (its workers must read {what}: give a URL, or a path they all see; the "
                         f"pieces between phases move through Dask, the output is written here)."),
            no_worker_option("the build"),
            staging_option(),
            click.option("--memory-limit", callback=parse_bytes, help="Memory a worker may hold, e.g. 4GiB "
                         "[default: this machine's memory over the workers and the assembling process]."),
        ]):
            f = option(f)
        return f
    return add


def inputs(*paths) -> list:
    """Input paths with ~ expanded here, as a shell does unquoted (a URL stays as it is): a task on a worker elsewhere
    gets them resolved."""
    return [None if p is None else os.path.expanduser(p) for p in paths]


def check_cluster(workers, scheduler, no_worker_timeout=None, staging=None, shards=None) -> None:
    if staging is not None and not (workers or scheduler or shards):
        raise click.UsageError("--staging goes with --shards, --workers or --scheduler")
    if workers and scheduler:
        raise click.UsageError("--workers starts a local cluster, --scheduler uses one: give one of them")
    if no_worker_timeout is not None and not (workers or scheduler):
        raise click.UsageError("--no-worker-timeout goes with --workers or --scheduler")
