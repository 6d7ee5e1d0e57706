"""`gtmkit demo`: the main job on built-in synthetic data (synthesize, build, report)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click

from ..cli import handle_errors
from ._common import StderrProgress, echo_json
from .stats import print_summary


@click.command("demo")
@click.option("--ads", default=200_000, show_default=True, help="Ads in the synthetic catalog.")
@click.option("--seed", default=0, show_default=True, help="Random seed of the synthetic catalog.")
@click.option("--workdir", type=click.Path(file_okay=False), help="Keep the catalog and index here [default: a temporary folder].")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
@click.option("-s", "--silent", is_flag=True, help="No progress bar.")
@handle_errors
def command(ads, seed, workdir, as_json, silent):
    """Synthesize an ad catalog, build its GTM index and print the index statistics.

    \b
    Example:
        gtmkit demo
        gtmkit demo --ads 1000000 --workdir demo/
    """
    from ..indexer.build import build_index
    from ..synth import write_catalog

    with tempfile.TemporaryDirectory(prefix="gtmkit-demo-") as tmp:
        work = Path(workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        catalog, _ = write_catalog(work / "catalog.parquet", ads, seed=seed)
        t_synth = time.perf_counter() - t0
        with StderrProgress(silent or as_json) as bar:
            index = build_index(catalog, work / "index", partition="static", k=[1, 4, 4, 2], progress=bar,
                                overwrite=True)
        stats = index.stats()
        if as_json:
            echo_json({"synth_seconds": t_synth, "stats": stats})
            return
        click.echo(f"synthesized {ads:,} ads in {t_synth:.1f} s -> {catalog}")
        print_summary(stats)
