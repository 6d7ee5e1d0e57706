"""`gtmkit demo`: the main job on built-in synthetic data (synthesize, build, stats, eval, match)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click

from ..errors import GtmkitError
from ._common import StderrProgress, echo_json, handle_errors, output_options
from .eval import _print as print_eval
from .stats import print_summary


DEMO_FILES = ("catalog.parquet", "catalog.schema.json", "index")


def check_workdir(work: Path, force: bool) -> None:
    """A missing or empty folder is used as is; any other only with --force, which replaces the demo's
    own files there (the index only if it is a gtmkit artifact) and touches nothing else."""
    try:
        entries = sorted(p.name for p in work.iterdir()) if work.exists() else []
    except OSError as exc:
        raise GtmkitError(f"{work}: cannot list the work folder ({exc.strerror or exc})") from None
    if entries and not force:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise GtmkitError(f"{work}: not empty ({shown}); pass --force to write {', '.join(DEMO_FILES)} there, "
                          "replacing those and leaving everything else alone")
    for name in DEMO_FILES[:2]:
        p = work / name
        if p.is_symlink() or (p.exists() and not p.is_file()):
            raise GtmkitError(f"{p}: not a regular file; refusing to replace it")


def _first_cpu_run(device: str) -> bool:
    from .._cache import compiled_marker
    from .._gpu import cuda_available
    if compiled_marker("demo").exists() or device == "cuda":
        return False
    return device == "cpu" or not cuda_available()


@click.command("demo")
@click.option("--ads", default=200_000, show_default=True, help="Ads in the synthetic catalog.")
@click.option("--seed", default=0, show_default=True, help="Random seed of catalog, users and logits.")
@click.option("--users", "n_users", default=64, show_default=True, help="Users to evaluate.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--workdir", type=click.Path(file_okay=False), help="Keep the catalog and index here [default: a temporary folder].")
@click.option("-f", "--force", is_flag=True, help="Use a --workdir that is not empty, replacing its catalog and index.")
@output_options("everything")
@handle_errors
def command(ads, seed, n_users, device, workdir, force, as_json, silent):
    """Synthesize an ad catalog, build its GTM index, print its statistics, evaluate CD-only against
    CD+GTM for synthetic users and run one request end to end.

    \b
    Example:
        gtmkit demo
        gtmkit demo --ads 1000000 --workdir demo/
    """
    if workdir:
        check_workdir(Path(workdir), force)
    from ..evaluate import evaluate
    from ..artifact.output import check_output
    from ..indexer.build import build_index
    from ..matcher.matcher import Matcher
    from ..synth import synth_users, write_catalog
    from .match import match_user
    from . import _warmup

    # a first run on the CPU: the evaluation's kernels compile in a second process while the catalog is built
    first_run = _first_cpu_run(device)
    warmup = _warmup.start() if first_run else None
    compiled = " (incl. compiling the kernels, once per install)" if first_run else ""
    with tempfile.TemporaryDirectory(prefix="gtmkit-demo-") as tmp, _warmup.stopping(warmup):
        work = Path(workdir or tmp)
        check_output(work / "index", overwrite=True)  # refused before anything is synthesized
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        catalog, _ = write_catalog(work / "catalog.parquet", ads, seed=seed)
        t_synth = time.perf_counter() - t0
        with StderrProgress(silent or as_json) as bar:
            index = build_index(catalog, work / "index", partition="static", k=[1, 4, 4, 2], progress=bar,
                                overwrite=True)
            users = synth_users(index.manifest["schema"], n_users + 1, seed)
            device = Matcher(index, device=device).device
            _warmup.finish(warmup)
            ev = evaluate(index, users[:n_users], seed=seed, device=device, progress=bar)
        example = match_user(index, users[-1], (1, 512, 1024, 1024), seed=seed, device=device, top=5)
        total = time.perf_counter() - t0
        if as_json:
            echo_json({"synth_seconds": t_synth, "stats": index.stats(), "eval": ev, "match": example,
                       "seconds": total})
            return
        click.echo(f"== synthesized {ads:,} ads in {t_synth:.1f} s: {catalog}")
        click.echo("== index statistics (gtmkit stats)")
        print_summary(index.stats())
        click.echo("\n== CD-only vs CD+GTM (gtmkit eval)")
        print_eval(ev)
        u = {k: v for k, v in users[-1].items() if not k.startswith("_")}
        click.echo("CD only: beams stay on SIDs that exist; CD+GTM: also on SIDs holding an ad the user's\n"
                   "targeting admits. Pass rate: eligible share of the ads behind the SIDs; SID precision: per SID.")
        click.echo(f"\n== one request (gtmkit match): {u}")
        click.echo(f"{example['sids_returned']} SIDs -> {example['eligible_ads']} eligible ads in {example['ms']:.1f} ms")
        for x in example["top"]:
            click.echo(f"  ad {x['ad_id']}  SID {tuple(x['sid'])}  score {x['score']:.3f}")
        click.echo(f"\ndemo finished in {total:.1f} s{compiled}")
        user = "'{\"country\": \"US\"}'"
        if workdir:
            click.echo(f"next: gtmkit match {work / 'index'} --user {user}  (README.md: the CLI and the Python API)")
        else:  # the temporary folder goes when the demo ends
            click.echo(f"next: gtmkit demo --workdir demo/ keeps the catalog and index, then gtmkit match demo/index "
                       f"--user {user}  (README.md: the CLI and the Python API)")
