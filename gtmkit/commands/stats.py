"""`gtmkit stats`: index statistics as a table, JSON, or a plot."""

from __future__ import annotations

import click

from ..errors import ArtifactError
from ._common import cache_option, echo_json, handle_errors, output_options


def _mb(b) -> str:
    return f"{b / 1e6:,.2f}"


def print_summary(s: dict) -> None:
    """The statistics as a table. They come from the artifact's manifest, which may have been edited: a
    malformed figure is one ArtifactError, raised before anything is printed."""
    lines = []
    try:
        _summary(s, lines.append)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ArtifactError(f"{s.get('path', 'index')}: the manifest's statistics are malformed "
                            f"({type(exc).__name__}: {exc})") from None
    click.echo("\n".join(lines))


def _summary(s: dict, e) -> None:
    e(f"{'index':<14}{s.get('path', '')}")
    e(f"{'SIDs':<14}{s['sids']:,}   ads {s['ads']:,}   nodes {s['nodes']:,}   L={s['sid_length']} V={s['vocab']}")
    q = s["ads_per_sid"]
    e(f"{'ads/SID':<14}p50 {q['p50']:g}  p90 {q['p90']:g}  p99 {q['p99']:g}  max {q['max']}  mean {q['mean']:.3f}")
    blooms = "  ".join(f"bloom:{k} {v} x u64" for k, v in s["bloom_words"].items())
    e(f"{'widths':<14}bitmask {s['bitmask_words']} x u64 ({s['bitmask_bits']} bits)  {blooms}")
    p = s["partition"]
    detail = {"static": f" k={','.join(map(str, p['k'] or []))}",
              "dynamic": f" target_fill={p['target_fill']} k_max={p['k_max']}"}.get(p["mode"], "")
    e(f"{'partition':<14}{p['mode']}{detail} ({p['layout']} ids)")
    names = [t["table"] for t in s["levels"][0]["tables"]] if s["levels"] else []
    head = f"{'level':>5} {'nodes':>12} {'parts/node':>10} {'max':>4}"
    for n in names:
        head += f" | {n + ' MB before/after':>30} {'unique':>10} {'fill':>5}"
    e("")
    e(head)
    for lv in s["levels"] + [{"level": "ad", **s["ad_level"]}]:
        ppn = lv["partitions_per_node"]
        row = f"{lv['level']:>5} {lv['nodes']:>12,} {ppn['mean']:>10.2f} {ppn['max']:>4}"
        for t in lv["tables"]:
            row += (f" | {_mb(t['bytes_before']):>14} / {_mb(t['bytes_after']):>13} {t['unique_rows']:>10,}"
                    f" {t['mean_fill']:>5.2f}")
        e(row)
    e("")
    tb = "  ".join(f"{k} {v['unique_rows']:,} rows {_mb(v['bytes'])} MB" for k, v in s["tables"].items())
    e(f"{'tables':<14}{tb}")
    b = s["bytes"]
    e(f"{'MB':<14}topology {_mb(b['topology'])} ({s['topology_bytes_per_million_sids'] / 1e6:.2f} per 1M SIDs)  "
      f"matcher ids {_mb(b['matcher_ids'])}  tables {_mb(b['matcher_tables'])}  SID->ad {_mb(b['sid_ad_map'])}  "
      f"ad index {_mb(b['ad_index'])}  total {_mb(b['total'])}")
    if "build_seconds" in s:
        bs = s["build_seconds"]
        e(f"{'build s':<14}" + "  ".join(f"{k} {v:.2f}" for k, v in bs.items()))
    if "shards" in s:
        e(f"{'built in':<14}{s['shards']} shards")
    if "updates" in s:
        u = s["updates"]
        e(f"{'updates':<14}{u['applied']} applied since the build, {u['ads_added']:,} ads added, "
          f"{u['slack_left']:,} of {u['slack_ads']:,} new ads left before a rebuild, {u['paused_ads']:,} paused")
    if s.get("wide_bitmask"):
        from ..targeting.semantics import wide_note
        e(f"{'note':<14}{wide_note(s['wide_bitmask'])}")
    if "rebuilt" in s:
        r = s["rebuilt"]
        e(f"{'rebuilt':<14}{r['subtrees']:,} of {r['of']:,} first-token subtrees ({r['ads']:,} ads, {r['tasks']} "
          f"tasks) from version {r['from_version']}")


def plot(s: dict, path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise click.ClickException("--plot needs matplotlib: pip install 'gtmkit[plot]'") from None
    levels = s["levels"]
    names = [t["table"] for t in levels[0]["tables"]]
    fig, axes = plt.subplots(1, 1 + len(names), figsize=(5 * (1 + len(names)), 4))
    ax = axes[0]
    x = range(len(levels))
    width = 0.8 / (2 * len(names))
    for i, n in enumerate(names):
        before = [lv["tables"][i]["bytes_before"] / 1e6 for lv in levels]
        after = [lv["tables"][i]["bytes_after"] / 1e6 for lv in levels]
        ax.bar([v + (2 * i) * width for v in x], before, width, label=f"{n} before dedup")
        ax.bar([v + (2 * i + 1) * width for v in x], after, width, label=f"{n} after dedup")
    ax.set_xticks([v + 0.4 - width / 2 for v in x], [f"level {lv['level']}" for lv in levels])
    ax.set_ylabel("MB")
    ax.set_title("matcher storage per level")
    ax.legend(fontsize=7)
    for i, n in enumerate(names):
        ax = axes[1 + i]
        for lv in levels:
            h = lv["tables"][i]["fill_hist"]
            edges = [j / len(h) for j in range(len(h))]
            ax.step(edges, h, where="post", label=f"level {lv['level']}")
        ax.set_yscale("log")
        ax.set_xlabel("fill rate")
        ax.set_title(f"{n}: fill-rate histogram")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


@click.command("stats")
@click.argument("index_dir", type=click.Path(file_okay=False))
@output_options("every statistic", silent=False)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write storage/fill plots to this PNG.")
@cache_option
@handle_errors
def command(index_dir, as_json, plot_path, cache):
    """Index statistics: SIDs, ads/SID, widths, per-level storage before/after dedup, fill rates, timings.

    \b
    Example:
        gtmkit stats index/
        gtmkit stats index/ --json > stats.json
        gtmkit stats index/ --plot stats.png
        gtmkit stats s3://bucket/index --cache /var/cache/gtmkit
    """
    from ..index import load_index

    s = load_index(index_dir, verify=False, cache=cache).stats()
    if plot_path:
        try:
            plot(s, plot_path)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise ArtifactError(f"{index_dir}: the manifest's statistics cannot be plotted "
                                f"({type(exc).__name__}: {exc})") from None
    if as_json:
        echo_json(s)
    else:
        print_summary(s)
