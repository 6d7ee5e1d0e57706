"""`gtmkit eval`: pass rates of CD-only vs CD+GTM, recall of eligible prefixes, partition sweep."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import click

from ..errors import GtmkitError
from ._common import StderrProgress, cache_option, echo_json, handle_errors, output_options
from ._users import index_beams, parse_beams, read_users_file, synth_users_for

def sweep_settings(L: int) -> list:
    """none, static k=(1,4,..,4,2) and (1,8,..,8,4) as in GRACE's p1..p3 layout, and two dynamic targets."""
    def static(mid, last):
        return [last] if L == 1 else [1] + [mid] * (L - 2) + [last]
    return [("none", {}), ("static", {"k": static(4, 2)}), ("static", {"k": static(8, 4)}),
            ("dynamic", {"target_fill": 0.4, "k_max": 8}), ("dynamic", {"target_fill": 0.2, "k_max": 16})]


def _print(r: dict) -> None:
    e = click.echo
    e(f"users {r['users']}  beams {','.join(map(str, r['beams']))}  logits {r['logits']}  device {r['device']}  "
      f"partition {r['partition']['mode']}")
    e(f"{'':<28}{'CD only':>12}{'CD+GTM':>12}")
    cd, g = r["cd"], r["gtm"]
    for key, label, fmt in [("pass_rate", "ad-level pass rate", "{:>12.2%}"),
                            ("sid_precision", "SID precision", "{:>12.2%}"),
                            ("sids_per_request", "SIDs / request", "{:>12.1f}"),
                            ("ads_expanded_per_request", "ads expanded / request", "{:>12.1f}"),
                            ("eligible_ads_per_request", "eligible ads / request", "{:>12.1f}"),
                            ("ms_per_request", "ms / request", "{:>12.2f}")]:
        e(f"{label:<28}" + fmt.format(cd[key]) + fmt.format(g[key]))
    for t, (a, b) in enumerate(zip(cd["surviving_candidates_per_step"], g["surviving_candidates_per_step"])):
        e(f"{'surviving candidates, step ' + str(t + 1):<28}{a:>12.1f}{b:>12.1f}")
    rc = r["recall"]
    e(f"recall of eligible prefixes {rc['recall']:.6f} over {rc['pairs']:,} (user, eligible ad) pairs "
      f"({rc['ads_sampled']:,} ads sampled)")


@click.command("eval")
@click.argument("index_dir", type=click.Path(file_okay=False))
@click.option("--users", "n_users", default=64, show_default=True, help="Synthetic users drawn from the index's world.")
@click.option("--users-file", type=click.Path(dir_okay=False), help="JSON-lines users instead of synthetic ones.")
@click.option("--seed", default=0, show_default=True, help="Seed of users and logits.")
@click.option("--beams", callback=parse_beams, help="Per-step beam sizes, one a SID token [default: 1,512,1024,... "
              "fitted to the index's SID length: 1,512,1024,1024 for 4 tokens].")
@click.option("--logits", type=click.Choice(["random", "peaked"]), default="peaked", show_default=True)
@click.option("--peak", type=float, help="Peaked logits: boost of the user's interest tokens.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--recall-sample", default=200_000, show_default=True, help="Ads sampled per user for the recall check.")
@click.option("--partition-sweep", is_flag=True, help="Rebuild with none/static/dynamic partitioning; pass rate vs storage.")
@click.option("--catalog", type=click.Path(), help="Catalog (file, folder or glob) for --partition-sweep [default: the one the index was built from].")
@cache_option
@output_options("the figures")
@handle_errors
def command(index_dir, n_users, users_file, seed, beams, logits, peak, device, recall_sample, partition_sweep,
            catalog, cache, as_json, silent):
    """Run CD-only and CD+GTM beam search for the same users and logits and compare them.

    Reports the ad-level target matching pass rate (eligible / expanded ads), SID precision, mean
    surviving candidates per step, ads and time per request, and the recall of eligible prefixes
    (share of (user, eligible ad) pairs whose every SID prefix passes GTM: always 1.0).

    \b
    Example:
        gtmkit eval index/ --users 64
        gtmkit eval index/ --users-file users.jsonl --logits random --json
        gtmkit eval index/ --partition-sweep
    """
    from ..evaluate import evaluate
    from ..index import load_index

    index = load_index(index_dir, verify=False, cache=cache)
    beams = index_beams(index, beams)
    users = read_users_file(users_file, index) if users_file else synth_users_for(index, n_users, seed)
    catalog = _sweep_catalog(index, catalog) if partition_sweep else None
    with StderrProgress(silent or as_json) as bar:
        result = evaluate(index, users, beams, logits, seed, device, recall_sample, peak, progress=bar)
        if partition_sweep:
            result["sweep"] = _sweep(index, users, beams, logits, seed, device, recall_sample, peak, catalog, bar)
    if as_json:
        echo_json(result)
        return
    _print(result)
    if partition_sweep:
        click.echo("")
        click.echo(f"{'partition':<34}{'matcher MB':>12}{'GTM pass rate':>15}{'CD pass rate':>14}{'recall':>9}")
        for row in result["sweep"]:
            click.echo(f"{row['setting']:<34}{row['matcher_bytes'] / 1e6:>12.1f}{row['pass_rate']:>15.2%}"
                       f"{row['cd_pass_rate']:>14.2%}{row['recall']:>9.4f}")


def _sweep_catalog(index, catalog):
    """The sweep's catalog, checked before the first evaluation rather than after it."""
    from ..errors import CatalogError
    from ..inputs.dataset import input_files

    if catalog:
        input_files(catalog, CatalogError, "Parquet file")
        return catalog
    recorded = index.manifest.get("source", {}).get("catalog")
    try:
        recorded = recorded and input_files(recorded, CatalogError) and recorded
    except CatalogError:
        recorded = None
    if not recorded:
        raise GtmkitError("--partition-sweep needs the catalog: pass --catalog (the index does not record an existing one)")
    return recorded


def _sweep(index, users, beams, logits, seed, device, recall_sample, peak, catalog, bar) -> list:
    from ..evaluate import evaluate
    from ..indexer.build import build_index

    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="gtmkit-sweep-"))
    try:
        for mode, kw in sweep_settings(index.sid_length):
            idx = build_index(catalog, tmp / "idx", schema=index.manifest["schema"], partition=mode, overwrite=True,
                              progress=bar, **kw)
            r = evaluate(idx, users, beams, logits, seed, device, recall_sample, peak, progress=bar)
            setting = mode + "".join(f" {k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in kw.items())
            rows.append({"setting": setting, "matcher_bytes": r["matcher_bytes"], "pass_rate": r["gtm"]["pass_rate"],
                         "cd_pass_rate": r["cd"]["pass_rate"], "sid_precision": r["gtm"]["sid_precision"],
                         "recall": r["recall"]["recall"]})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows
