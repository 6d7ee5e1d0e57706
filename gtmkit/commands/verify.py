"""`gtmkit verify`: checksums, structure, and with the catalog a full recomputation."""

from __future__ import annotations

import click

from ._common import StderrProgress, cache_option, handle_errors, output_options, report_problems


@click.command("verify")
@click.argument("index_dir", type=click.Path(file_okay=False))
@click.option("--catalog", type=click.Path(), help="Recompute every SID path and ad row from this catalog (file, folder or glob; a path or URL).")
@click.option("--schema", type=click.Path(dir_okay=False), help="Schema for --catalog, a path or URL [default: the index's own].")
@cache_option
@output_options()
@handle_errors
def command(index_dir, catalog, schema, cache, as_json, silent):
    """Check an index: manifest digest, checksums, every invariant the matchers rely on, matcher
    coverage, and (with --catalog) its contents.

    Prints each problem on one line (FAIL ...) and exits 1 when there is any.

    \b
    Example:
        gtmkit verify index/
        gtmkit verify index/ --catalog catalog.parquet --json
    """
    from ..indexer.verify import verify_index

    with StderrProgress(silent or as_json) as bar:
        problems = verify_index(index_dir, catalog=catalog, schema=schema, progress=bar, cache=cache)
    checks = ["manifest", "checksums", "invariants", "coverage"] + (["catalog"] if catalog else [])
    report_problems(problems, as_json, {"index": index_dir, "checks": checks}, f"OK {index_dir}: {', '.join(checks)}")
