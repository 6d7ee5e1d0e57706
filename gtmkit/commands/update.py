"""`gtmkit update`: changed ads and paused ads written into an index as its new version, without a full build."""

from __future__ import annotations

import click
import numpy as np

from ._cluster import check_cluster, dask_client, inputs, no_worker_option, staging_option
from ._common import StderrProgress, cache_option, echo_json, handle_errors, output_options
from ._stops import watched


def _read_ids(path) -> np.ndarray:
    """Ad ids from a text file, one a line (blank lines and lines starting with # skipped)."""
    from ..errors import GtmkitError
    from ..inputs.files import read_text
    lines = read_text(path, GtmkitError, "file of ad ids").splitlines()  # a FIFO or device would block
    out = []
    for i, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            v = int(line)
        except ValueError:
            raise GtmkitError(f"{path}, line {i}: {line[:40]!r} is not an ad id") from None
        if not -2**63 <= v < 2**63:
            raise GtmkitError(f"{path}, line {i}: ad id {v} does not fit int64")
        out.append(v)
    return np.asarray(out, np.int64)


@click.command("update")
@click.argument("index_dir", type=click.Path(file_okay=False))
@click.argument("changes", type=click.Path(), required=False)
@click.option("--pause", "pause_file", type=click.Path(dir_okay=False),
              help="Ad ids to serve paused (a text file, one a line), kept in the new version.")
@click.option("--resume", "resume_file", type=click.Path(dir_okay=False), help="Ad ids to serve again (same form).")
@click.option("--rebuild-shards", is_flag=True, help="Add ads on SIDs the index lacks too, by rebuilding the "
              "first-token subtrees they fall in (the others are kept as they are).")
@click.option("--workers", type=click.IntRange(min=1), help="With --rebuild-shards: rebuild the subtrees on a local "
              "Dask cluster of this many worker processes (extra dist).")
@click.option("--scheduler", help="With --rebuild-shards: rebuild the subtrees on the Dask cluster at this address "
              "(the subtrees' inputs and pieces move through Dask).")
@no_worker_option("the update")
@staging_option()
@cache_option
@output_options("the report")
@handle_errors
def command(index_dir, changes, pause_file, resume_file, rebuild_shards, workers, scheduler, no_worker_timeout, staging,
            cache, as_json, silent):
    """Apply changed ads (CHANGES: a Parquet file, folder or glob, local or a URL, in the index's catalog schema:
    edits of ads it holds, by ad id, and new ads) and paused ads, and write the result as the index's new version;
    processes that loaded the old version keep serving it until they reload.

    Ads whose SID is not in the index's trie are left out and listed (a build adds them), or, with
    --rebuild-shards, added by rebuilding only the first-token subtrees those SIDs fall in. Fails, changing
    nothing, when the new ads applied in place would pass the index's slack (set by `gtmkit build --slack`) or
    an id to pause or resume is not an ad of the index. The new version is published only over the version the
    update read: when another writer published first, the update is applied again on top of its version (up to
    10 times, then it fails naming both versions), so no writer's changes are lost.

    \b
    Example:
        gtmkit update index/ changes.parquet
        gtmkit update index/ changes.parquet --rebuild-shards --workers 4
        gtmkit update index/ --pause paused.txt --resume resumed.txt --json
        gtmkit update s3://bucket/index changes.parquet --cache /var/cache/gtmkit
    """
    from ..errors import GtmkitError
    from ..indexer.update.publish import update_path

    if changes is None and pause_file is None and resume_file is None:
        raise GtmkitError("nothing to update: give CHANGES, --pause or --resume")
    if (workers or scheduler or staging) and not rebuild_shards:
        raise click.UsageError("--workers, --scheduler and --staging go with --rebuild-shards")
    check_cluster(workers, scheduler, no_worker_timeout)
    changes, pause_file, resume_file = inputs(changes, pause_file, resume_file)
    pause = _read_ids(pause_file) if pause_file else None
    resume = _read_ids(resume_file) if resume_file else None
    # a cluster named by --scheduler is reached first: a bad address fails before anything is read
    with dask_client(scheduler) as client, StderrProgress(silent or as_json) as bar, watched(index_dir):
        done = update_path(index_dir, changes, pause, resume, rebuild_shards, client, workers, bar,
                           no_worker_timeout=no_worker_timeout, cache=cache, staging=staging)
    _print(index_dir, done, as_json)


def _print(index_dir, done, as_json: bool) -> None:
    rep, paused, written = done.report, done.paused, done.written
    out = {"index": index_dir, **rep.as_dict(), "paused_ads": int(len(paused)), "written": bool(written),
           "base_version": done.base, "tries": done.tries}
    if as_json:
        echo_json(out)
        return
    if done.tries > 1:  # another writer published first: this update was applied again on top of its version
        click.echo(f"{index_dir}: applied again on version {done.base}, which other writers published meanwhile "
                   f"({done.tries} tries)")
    if not written:  # an empty change set, or pauses of paused ads: no new version
        click.echo(f"{index_dir}: nothing to apply; the index is unchanged ({len(paused)} paused)")
        return
    click.echo(f"{index_dir}: {rep.edited} ads edited, {rep.added} added, {rep.unions_grown} partition unions "
               f"grown, {len(paused)} paused; {rep.slack_left} more new ads before a rebuild")
    if rep.new_sids:
        shown = ", ".join(str(x) for x in rep.new_sids[:10]) + (" ..." if len(rep.new_sids) > 10 else "")
        click.echo(f"{len(rep.new_sids)} ads on SIDs the index lacks were left out (a build or --rebuild-shards adds "
                   f"them): {shown}")
    if rep.rebuilt:
        r = rep.rebuilt
        click.echo(f"rebuilt {r['subtrees']} of {r['of']} first-token subtrees ({r['ads']} ads) in {r['tasks']} "
                   f"tasks; the rest kept")
