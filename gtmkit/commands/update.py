"""`gtmkit update`: changed ads and paused ads written into an index as its new version, without a rebuild."""

from __future__ import annotations

import copy

import click
import numpy as np

from ._common import StderrProgress, echo_json, handle_errors


def _read_ids(path) -> np.ndarray:
    """Ad ids from a text file, one a line (blank lines and lines starting with # skipped)."""
    from ..errors import GtmkitError
    from ..formats.inputs import read_text
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
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("-s", "--silent", is_flag=True, help="No progress bar or first-compile notice on stderr.")
@handle_errors
def command(index_dir, changes, pause_file, resume_file, as_json, silent):
    """Apply changed ads (CHANGES: a Parquet file, folder or glob in the index's catalog schema: edits of ads it
    holds, by ad id, and new ads) and paused ads, and write the result as the index's new version; processes
    that loaded the old version keep serving it until they reload.

    Ads whose SID is not in the index's trie are left out and listed: a build adds them. Fails, changing
    nothing, when the new ads would pass the index's slack (set by `gtmkit build --slack`) or an id to pause or
    resume is not an ad of the index.

    \b
    Example:
        gtmkit update index/ changes.parquet
        gtmkit update index/ --pause paused.txt --resume resumed.txt --json
    """
    from ..errors import GtmkitError
    from ..formats.index_format import update_state
    from ..index import load_index
    from ..indexer.update import UpdateReport, read_changes, update_index
    from ..indexer.update.write import write_updated

    if changes is None and pause_file is None and resume_file is None:
        raise GtmkitError("nothing to update: give CHANGES, --pause or --resume")
    with StderrProgress(silent or as_json) as bar:
        index = load_index(index_dir)
        if changes is not None:
            updated, rep = update_index(index, read_changes(index, changes, bar))
        else:
            u = update_state(index.manifest)
            updated, rep = index, UpdateReport(version=index.version, slack_left=u["slack_ads"] - u["added"])
        paused = np.asarray(index.paused_ad_ids, np.int64)
        if pause_file or resume_file:
            pause = _read_ids(pause_file) if pause_file else np.zeros(0, np.int64)
            resume = _read_ids(resume_file) if resume_file else np.zeros(0, np.int64)
            updated.ad_rows(np.concatenate([pause, resume]))  # RequestError naming the first unknown id
            paused = np.setdiff1d(np.union1d(paused, pause), resume)
        written = updated is not index or not np.array_equal(paused, index.paused_ad_ids)
        if written:
            if updated is index:  # pauses alone: the same arrays, a new version
                updated = copy.copy(index)
                u = update_state(index.manifest)
                updated.manifest = {**index.manifest, "updates": {**u, "updates": u["updates"] + 1}}
            updated.paused_ad_ids = paused
            write_updated(updated, bar)
    out = {"index": index_dir, **rep.as_dict(), "paused_ads": int(len(paused)), "written": bool(written)}
    if as_json:
        echo_json(out)
        return
    if not written:  # an empty change set, or pauses of paused ads: no new version
        click.echo(f"{index_dir}: nothing to apply; the index is unchanged ({len(paused)} paused)")
        return
    click.echo(f"{index_dir}: {rep.edited} ads edited, {rep.added} added, {rep.unions_grown} partition unions "
               f"grown, {len(paused)} paused; {rep.slack_left} more new ads before a rebuild")
    if rep.new_sids:
        shown = ", ".join(str(x) for x in rep.new_sids[:10]) + (" ..." if len(rep.new_sids) > 10 else "")
        click.echo(f"{len(rep.new_sids)} ads on SIDs the index lacks were left out (a build adds them): {shown}")
