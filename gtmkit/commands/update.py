"""`gtmkit update`: changed ads written into an index as its new version, without a rebuild."""

from __future__ import annotations

import click

from ._common import StderrProgress, echo_json, handle_errors


@click.command("update")
@click.argument("index_dir", type=click.Path(file_okay=False))
@click.argument("changes", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("-s", "--silent", is_flag=True, help="No progress bar or first-compile notice on stderr.")
@handle_errors
def command(index_dir, changes, as_json, silent):
    """Apply changed ads (a Parquet file, folder or glob in the index's catalog schema: edits of ads it holds, by
    ad id, and new ads) and write the result as the index's new version; processes that loaded the old version
    keep serving it until they reload.

    Ads whose SID is not in the index's trie are left out and listed: a build adds them. Fails, changing
    nothing, when the new ads would pass the index's slack (set by `gtmkit build --slack`).

    \b
    Example:
        gtmkit update index/ changes.parquet
        gtmkit update index/ changes.parquet --json
    """
    from ..index import load_index
    from ..indexer.update import read_changes, update_index
    from ..indexer.update.write import write_updated

    with StderrProgress(silent or as_json) as bar:
        index = load_index(index_dir)
        updated, rep = update_index(index, read_changes(index, changes, bar))
        if updated is not index:
            write_updated(updated, bar)
    out = {"index": index_dir, **rep.as_dict()}
    if as_json:
        echo_json(out)
        return
    click.echo(f"{index_dir}: {rep.edited} ads edited, {rep.added} added, {rep.unions_grown} partition unions "
               f"grown; {rep.slack_left} more new ads before a rebuild")
    if rep.new_sids:
        shown = ", ".join(str(x) for x in rep.new_sids[:10]) + (" ..." if len(rep.new_sids) > 10 else "")
        click.echo(f"{len(rep.new_sids)} ads on SIDs the index lacks were left out (a build adds them): {shown}")
